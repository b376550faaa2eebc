package observe

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// routeMetrics are the metrics of routes and upstream pools. Their labels
// are route and upstream names from the rule file, and a status class.
type routeMetrics struct {
	requests  *prometheus.CounterVec
	ejections *prometheus.CounterVec
	// byRoute caches the requests children of each (route, upstream),
	// keyed by routeLabels, as Metrics.rules does for the rules: the
	// request path does not hash label values into the vector. The
	// names are bounded by the rule files loaded.
	byRoute *sync.Map
}

// routeLabels are the labels of one routeCounters.
type routeLabels struct{ route, upstream string }

// routeCounters are the requests children of one (route, upstream) by
// status class, each resolved on first use (a class never seen has no
// series).
type routeCounters [len(statusClasses)]atomic.Pointer[prometheus.Counter]

func newRouteMetrics(register func(prometheus.Collector)) routeMetrics {
	m := routeMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_route_requests_total",
			Help: "Requests that took a route of the rule file, by route, upstream and response status class (1xx..5xx).",
		}, []string{"route", "upstream", "class"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_upstream_ejections_total",
			Help: "Targets taken out of an upstream's pool after failing requests in a row, by upstream.",
		}, []string{"upstream"}),
		byRoute: &sync.Map{},
	}
	register(m.requests)
	register(m.ejections)
	return m
}

var statusClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// observeRoute counts a request that took a route.
func (m *Metrics) observeRoute(o *Outcome) {
	c := o.Status / 100
	if c < 0 || c >= len(statusClasses) {
		c = 0
	}
	k := routeLabels{o.Route, o.Upstream}
	v, ok := m.routes.byRoute.Load(k)
	if !ok {
		v, _ = m.routes.byRoute.LoadOrStore(k, new(routeCounters))
	}
	cp := &v.(*routeCounters)[c]
	if p := cp.Load(); p != nil {
		(*p).Inc()
		return
	}
	child := m.routes.requests.WithLabelValues(o.Route, o.Upstream, statusClasses[c])
	cp.Store(&child)
	child.Inc()
}

// Ejected counts a target's ejection from upstream's pool. It implements
// upstream.Events.
func (m *Metrics) Ejected(upstreamName string) {
	m.routes.ejections.WithLabelValues(upstreamName).Inc()
}

var _ upstream.Events = (*Metrics)(nil)
