package observe

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NearLimitRatio is the share of a limit that, once used by an admitted
// request, counts it as near the limit (Envoy's near_limit uses 80%).
const NearLimitRatio = 0.8

// Every label value below is bounded by the rule file: app is a configured
// app ID or "*", api a rule pattern or "" (docs/operations.md, "Metrics"). A caller's raw app
// ID or path never becomes a label.

// limiterBuckets resolve the memory store's microsecond decisions up to a
// slow Redis round trip.
var limiterBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,
}

// requestBuckets resolve whole requests from sub-millisecond 429s to slow
// upstreams.
var requestBuckets = []float64{
	1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// Metrics are the Prometheus metrics of `gateway serve`. Create one per registry
// with NewMetrics; it is safe for concurrent use.
type Metrics struct {
	// ProcessMetrics are the process's: build, Go runtime, store.
	*ProcessMetrics
	requests          *prometheus.CounterVec
	nearLimit         *prometheus.CounterVec
	requestDuration   *prometheus.HistogramVec
	durations         [NumDecisions]prometheus.Observer
	codes             [600]atomic.Pointer[prometheus.Counter] // upstreamResponses children by code
	limiterDuration   prometheus.Observer
	upstreamResponses *prometheus.CounterVec
	upstreamErrors    *prometheus.CounterVec
	storeErrors       prometheus.Counter
	chargeErrors      prometheus.Counter
	costUnits         *prometheus.CounterVec
	// tokenUnits are the units charged to limits whose cost the response
	// body reports (LLM tokens), by app and plan: both come from the
	// rule file, so the labels are bounded.
	tokenUnits *prometheus.CounterVec
	// pricedTokens are the tokens of responses to limits priced per
	// model, by app, plan and kind (input, output); spend is what they
	// were charged, in micro-units.
	pricedTokens *prometheus.CounterVec
	spend        *prometheus.CounterVec
	costMissing  *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	rulesLoaded  prometheus.Gauge
	routes       routeMetrics
	handler      http.Handler
	// rules caches the ruleMetrics of each (app, api), keyed by
	// ruleLabels. The label values are bounded by the rule files loaded.
	rules sync.Map
}

// MetricsConfig configures NewMetrics.
type MetricsConfig struct {
	// Registry receives every metric, the Go and process collectors
	// included. Required; the gateway never uses the global registry.
	Registry *prometheus.Registry
	// Store names the store for the store label. Default "memory".
	Store string
	// Keys, if not nil, reports the number of keys the store tracks.
	Keys func() int
	// Version is the gateway's version for gateway_build_info.
	Version string
	// Exemplars serves the OpenMetrics format to scrapers that ask for
	// it, whose request-duration histogram carries the trace and span
	// IDs of sampled requests as exemplars; set it when tracing is on.
	Exemplars bool
}

// NewMetrics registers the gateway's metrics with cfg.Registry.
func NewMetrics(cfg MetricsConfig) *Metrics {
	if cfg.Store == "" {
		cfg.Store = "memory"
	}
	reg := cfg.Registry
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	storeLabel := prometheus.Labels{"store": cfg.Store}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total",
			Help: "Requests by app, matched rule and limiter decision.",
		}, []string{"app", "api", "decision"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_near_limit_total",
			Help: "Admitted requests that left a limit at least 80% used, by app and rule (api \"\" is the app total).",
		}, []string{"app", "api"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_request_duration_seconds",
			Help:    "Whole-request time in the gateway, upstream included, by decision.",
			Buckets: requestBuckets,
		}, []string{"decision"}),
		upstreamResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_upstream_responses_total",
			Help: "Responses from the upstream by status code.",
		}, []string{"code"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_upstream_errors_total",
			Help: "Forwarded requests that got no upstream response, by kind (timeout, refused, failed, client_closed, no_healthy_target, client_body).",
		}, []string{"kind"}),
		costUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_cost_units_total",
			Help: "Units counted against limits, by app and rule (api \"\" is the app total): costs at decision and charges of responses.",
		}, []string{"app", "api"}),
		tokenUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_token_units_total",
			Help: "Units (LLM tokens) charged to limits whose cost the response body reports, by app and plan (\"\" for an app's own rules); not those priced per model.",
		}, []string{"app", "plan"}),
		pricedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_priced_tokens_total",
			Help: "LLM tokens that responses reported to limits priced per model, by app, plan and kind (input, output).",
		}, []string{"app", "plan", "kind"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_spend_micros_total",
			Help: "Money charged to limits priced per model, in micro-units (millionths) of the prices' currency, by app and plan.",
		}, []string{"app", "plan"}),
		costMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_cost_header_missing_total",
			Help: "Responses whose cost (the cost header, or the usage a body rule reads) was missing or invalid, so that the limit's min, or its reserve when it holds one, was charged, by app and rule.",
		}, []string{"app", "api"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rules_reloads_total",
			Help: "Rule loads (the initial one included) by result: success, failure, or unchanged (the rules read were those in force).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_rules_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful rule load.",
		}),
		rulesLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_rules_loaded",
			Help: "Limits in force: API rules plus app totals.",
		}),
	}
	limiterDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_limiter_duration_seconds",
		Help:    "Time the store took to decide a request.",
		Buckets: limiterBuckets,
	}, []string{"store"})
	m.limiterDuration = limiterDuration.With(storeLabel)
	storeErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_store_errors_total",
		Help: "Store calls that failed.",
	}, []string{"store"})
	m.storeErrors = storeErrors.With(storeLabel)
	chargeErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_charge_errors_total",
		Help: "Charges of a response's cost that the store failed to count.",
	}, []string{"store"})
	m.chargeErrors = chargeErrors.With(storeLabel)

	f(m.requests)
	f(m.nearLimit)
	f(m.requestDuration)
	f(limiterDuration)
	f(m.upstreamResponses)
	f(m.upstreamErrors)
	f(storeErrors)
	f(chargeErrors)
	f(m.costUnits)
	f(m.tokenUnits)
	f(m.pricedTokens)
	f(m.spend)
	f(m.costMissing)
	f(m.reloads)
	f(m.lastReload)
	f(m.rulesLoaded)
	m.routes = newRouteMetrics(f)
	m.ProcessMetrics = NewProcessMetrics(ProcessConfig{Registry: reg, Store: cfg.Store, Keys: cfg.Keys, Version: cfg.Version})
	for d := range NumDecisions {
		m.durations[d] = m.requestDuration.WithLabelValues(d.String())
	}
	// Both results exist from the start, so rate() and alerts see a 0.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.reloads.WithLabelValues("unchanged")
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: cfg.Exemplars})
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler { return m.handler }

// ruleMetrics are the metric children of one (app, api) pair, each
// resolved on its first count and kept by Metrics, so that the request
// path does not hash label values into the vectors. A series exists once
// it has been counted: a rule that only ever admits has one series, not
// one per decision (docs/operations.md, "Metrics").
type ruleMetrics struct {
	requests [NumDecisions]atomic.Pointer[prometheus.Counter]
	near     atomic.Pointer[prometheus.Counter]
	// units and missing are the cost metrics.
	units, missing atomic.Pointer[prometheus.Counter]
}

// child returns the child of vec for app and api that c caches,
// resolving it once.
func child(c *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, app, api string) prometheus.Counter {
	if p := c.Load(); p != nil {
		return *p
	}
	return resolve(c, vec, app, api)
}

// resolve creates the child of vec for labels, and caches it in c.
func resolve(c *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	ch := vec.WithLabelValues(labels...)
	c.Store(&ch)
	return ch
}

// ruleLabels are the labels of one ruleMetrics.
type ruleLabels struct{ app, api string }

// rule returns the metric children of app and api.
func (m *Metrics) rule(app, api string) *ruleMetrics {
	k := ruleLabels{app, api}
	if rm, ok := m.rules.Load(k); ok {
		return rm.(*ruleMetrics)
	}
	got, _ := m.rules.LoadOrStore(k, new(ruleMetrics))
	return got.(*ruleMetrics)
}

// ObserveRequest records one request. It implements Observer.
func (m *Metrics) ObserveRequest(o *Outcome) {
	d := o.Decision
	c := &m.rule(o.App, o.API).requests[d]
	if p := c.Load(); p != nil {
		(*p).Inc()
	} else {
		resolve(c, m.requests, o.App, o.API, d.String()).Inc()
	}
	m.observeDuration(o)
	if o.n > 0 || o.StoreError {
		m.limiterDuration.Observe(o.LimiterDuration.Seconds())
	}
	if o.StoreError {
		m.storeErrors.Inc()
	}
	if o.ChargeError {
		m.chargeErrors.Inc()
	}
	if o.Route != "" {
		m.observeRoute(o)
	}
	if o.Decision == DecisionLimited {
		return
	}
	for _, l := range o.Limits() {
		if l.Charged == 0 && !l.CostMissing {
			continue
		}
		rm := m.rule(l.App, l.API)
		if l.Charged > 0 {
			child(&rm.units, m.costUnits, l.App, l.API).Add(float64(l.Charged))
			switch {
			case l.Priced:
				m.spend.WithLabelValues(l.App, l.Plan).Add(float64(l.Charged))
			case l.Tokens:
				m.tokenUnits.WithLabelValues(l.App, l.Plan).Add(float64(l.Charged))
			}
		}
		if l.Priced {
			m.pricedTokens.WithLabelValues(l.App, l.Plan, "input").Add(float64(l.InputTokens))
			m.pricedTokens.WithLabelValues(l.App, l.Plan, "output").Add(float64(l.OutputTokens))
		}
		if l.CostMissing {
			child(&rm.missing, m.costMissing, l.App, l.API).Inc()
		}
	}
	for _, l := range o.Limits() {
		if l.Allowed && l.Limit > 0 && float64(l.Limit-l.Remaining) >= NearLimitRatio*float64(l.Limit) {
			child(&m.rule(l.App, l.API).near, m.nearLimit, l.App, l.API).Inc()
		}
	}
}

// observeDuration records the request's duration, with its trace as the
// exemplar when it was sampled.
func (m *Metrics) observeDuration(o *Outcome) {
	h := m.durations[o.Decision]
	if o.Span != nil {
		if sc := o.Span.SpanContext(); sc.IsSampled() {
			if eo, ok := h.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(o.Duration.Seconds(), prometheus.Labels{
					"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(),
				})
				return
			}
		}
	}
	h.Observe(o.Duration.Seconds())
}

// UpstreamResponse records a response from the upstream.
func (m *Metrics) UpstreamResponse(code int) {
	if code < 0 || code >= len(m.codes) {
		m.upstreamResponses.WithLabelValues(strconv.Itoa(code)).Inc()
		return
	}
	c := m.codes[code].Load()
	if c == nil {
		child := m.upstreamResponses.WithLabelValues(strconv.Itoa(code))
		c = &child
		m.codes[code].Store(c)
	}
	(*c).Inc()
}

// UpstreamError records a forwarded request that got no response.
func (m *Metrics) UpstreamError(kind string) {
	m.upstreamErrors.WithLabelValues(kind).Inc()
}

// RulesLoaded records a successful rule load (the initial one or a
// reload) at at, of a rule set with limits limits in force (API rules
// plus app totals).
func (m *Metrics) RulesLoaded(limits int, at time.Time) {
	m.reloads.WithLabelValues("success").Inc()
	m.lastReload.Set(float64(at.UnixNano()) / 1e9)
	m.rulesLoaded.Set(float64(limits))
}

// RulesFailed records a rule load that failed: the rules in force stay.
func (m *Metrics) RulesFailed() { m.reloads.WithLabelValues("failure").Inc() }

// RulesUnchanged records a reload that read the rules in force again.
func (m *Metrics) RulesUnchanged() { m.reloads.WithLabelValues("unchanged").Inc() }

var _ Observer = (*Metrics)(nil)
