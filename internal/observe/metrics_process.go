package observe

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// ProcessConfig configures NewProcessMetrics.
type ProcessConfig struct {
	// Registry receives the metrics. Required.
	Registry prometheus.Registerer
	// Store names the store for the store label. Default "memory".
	Store string
	// Keys, if not nil, reports the number of keys the store tracks.
	Keys func() int
	// Version is the gateway's version for gateway_build_info. Default
	// "dev".
	Version string
}

// ProcessMetrics are the metrics of a gateway process whatever it serves:
// the Go and process collectors, gateway_build_info, and the store's
// circuit breaker and keys. `gateway serve`'s Metrics and `gateway rls`
// each register them once; they are safe for concurrent use.
type ProcessMetrics struct {
	circuitOpen prometheus.Gauge
}

// NewProcessMetrics registers the process's metrics with cfg.Registry.
func NewProcessMetrics(cfg ProcessConfig) *ProcessMetrics {
	if cfg.Store == "" {
		cfg.Store = "memory"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	p := &ProcessMetrics{circuitOpen: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_store_circuit_open",
		Help: "1 while the store's circuit breaker skips the store, else 0.",
	})}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_build_info",
		Help: "Always 1; the labels say which build is running.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(cfg.Version, runtime.Version()).Set(1)
	keys := cfg.Keys
	if keys == nil {
		keys = func() int { return 0 }
	}
	keysGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "gateway_limiter_keys",
		Help:        "Counters the store tracks.",
		ConstLabels: prometheus.Labels{"store": cfg.Store},
	}, func() float64 { return float64(keys()) })
	cfg.Registry.MustRegister(p.circuitOpen, keysGauge, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return p
}

// SetCircuitOpen records the state of the store's circuit breaker.
func (p *ProcessMetrics) SetCircuitOpen(open bool) {
	v := 0.0
	if open {
		v = 1
	}
	p.circuitOpen.Set(v)
}
