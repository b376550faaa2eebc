package rls

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// outcome is what became of one descriptor, as the metrics label it.
type outcome uint8

const (
	outOK outcome = iota + 1
	outOverLimit
	outShadow // denied by a shadow_mode limit, reported OK
	outUnlimited
	outReplaced
	outNoLimit
	outFailOpen
	outFailClosed
	outFailLocal
)

var outcomeNames = [...]string{"", "ok", "over_limit", "shadow_over_limit", "unlimited", "replaced", "no_limit", "fail_open", "fail_closed", "fail_local"}

func (o outcome) String() string { return outcomeNames[o] }

// Label values the metrics use in place of unbounded ones.
const (
	// unknownDomain labels requests for a domain not in the config:
	// domains come from the callers, so they are not labels.
	unknownDomain = "(unknown)"
	// overrideLabel labels descriptors with a limit override from Envoy.
	overrideLabel = "(override)"
)

// Metrics are the service's Prometheus metrics. Their labels are bounded
// by the configuration: the domain (unknown ones as "(unknown)") and the
// descriptor's configured path ("key_value.key"), never the values
// requests bring, unless the descriptor sets detailed_metric.
type Metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	hits        *prometheus.CounterVec
	storeErrors prometheus.Counter
	reloads     *prometheus.CounterVec
	limits      prometheus.Gauge
	loadedAt    prometheus.Gauge
}

// NewMetrics registers the service's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	reg.MustRegister(m.requests, m.descriptors, m.hits, m.storeErrors, m.reloads, m.limits, m.loadedAt)
	return m
}

func (m *Metrics) observe(domain, descriptor string, out outcome, hits int64) {
	m.descriptors.WithLabelValues(domain, descriptor, out.String()).Inc()
	m.hits.WithLabelValues(domain, descriptor).Add(float64(hits))
}

// Loaded records a load of the config: c on success, nil on failure.
func (m *Metrics) Loaded(c *rlsconfig.Config, unixSeconds float64) {
	if c == nil {
		m.reloads.WithLabelValues("failure").Inc()
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.limits.Set(float64(c.Limits()))
	m.loadedAt.Set(unixSeconds)
}

// metricLabel returns the descriptor label of a match: the configured
// path, or with detailed_metric the request's keys and values.
func metricLabel(d *rlsconfig.Descriptor, es []rlsconfig.Entry) string {
	if !d.DetailedMetric {
		return d.Path
	}
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
