package observe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RLSMetrics are the Prometheus metrics of `gateway rls`'s calls
// (docs/rls.md, "Metrics"). Their labels are bounded by the
// configuration, as `serve`'s are by the rule file: the domain (its
// caller labels unknown ones as one value) and the descriptor's
// configured path, never the values requests bring, unless the
// descriptor sets detailed_metric. It is safe for concurrent use.
type RLSMetrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	hits        *prometheus.CounterVec
	storeErrors prometheus.Counter
	reloads     *prometheus.CounterVec
	limits      prometheus.Gauge
	loadedAt    prometheus.Gauge
}

// NewRLSMetrics registers the metrics of `gateway rls`'s calls with reg.
func NewRLSMetrics(reg prometheus.Registerer) *RLSMetrics {
	m := &RLSMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rls_requests_total",
			Help: "ShouldRateLimit calls answered, by domain and overall code (ok, over_limit).",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rls_descriptors_total",
			Help: "Descriptors that matched a limit, by domain, configured descriptor path and outcome (ok, over_limit, shadow_over_limit, unlimited, replaced, fail_open, fail_closed, fail_local).",
		}, []string{"domain", "descriptor", "outcome"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rls_hits_total",
			Help: "Hits (hits_addend) asked for by descriptors that matched a limit, counted or not.",
		}, []string{"domain", "descriptor"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_rls_store_errors_total",
			Help: "Calls that the store failed, decided by --fail-mode.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rls_config_reloads_total",
			Help: "Loads of the --config file or directory, by result (success, failure); a failure keeps the config in force.",
		}, []string{"result"}),
		limits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_rls_config_limits",
			Help: "Descriptors with a rate_limit in the config in force.",
		}),
		loadedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_rls_config_loaded_timestamp_seconds",
			Help: "When the config in force was loaded, in Unix seconds.",
		}),
	}
	// Both results exist from the start, so rate() and alerts see a 0.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	reg.MustRegister(m.requests, m.descriptors, m.hits, m.storeErrors, m.reloads, m.limits, m.loadedAt)
	return m
}

// Descriptor counts a descriptor that matched a limit: its outcome, and
// the hits it asked for.
func (m *RLSMetrics) Descriptor(domain, descriptor, outcome string, hits int64) {
	m.descriptors.WithLabelValues(domain, descriptor, outcome).Inc()
	m.hits.WithLabelValues(domain, descriptor).Add(float64(hits))
}

// Call counts an answered call by its overall code ("ok", "over_limit").
func (m *RLSMetrics) Call(domain, code string) {
	m.requests.WithLabelValues(domain, code).Inc()
}

// StoreError counts a call that the store failed.
func (m *RLSMetrics) StoreError() { m.storeErrors.Inc() }

// ConfigLoaded records a config put in force at, with limits limits.
func (m *RLSMetrics) ConfigLoaded(limits int, at time.Time) {
	m.reloads.WithLabelValues("success").Inc()
	m.limits.Set(float64(limits))
	m.loadedAt.Set(float64(at.UnixNano()) / 1e9)
}

// ConfigFailed records a load of the config that failed: the config in
// force stays.
func (m *RLSMetrics) ConfigFailed() { m.reloads.WithLabelValues("failure").Inc() }
