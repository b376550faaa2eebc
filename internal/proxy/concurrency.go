package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// Concurrency limits (concurrency in docs/algorithms.md, "Concurrency: requests
// in flight") take their slots after the keys are built and before the
// rate limits are asked: a request refused for concurrency is counted
// against no rate limit, and one that a rate limit (or a fail mode)
// refuses gives its slots back at once. The slots are released when the
// request leaves ServeHTTP, however it leaves: the response completed,
// the client gone, the upstream failed or timed out, a WebSocket tunnel
// closed (ReverseProxy serves it inside ServeHTTP), or a panic.

// addConcurrency adds the concurrency limits of a request's section and
// matched rule (nil for none) to sc.
func (sc *scratch) addConcurrency(sec *ruleset.Section, rule *ruleset.Limit) {
	if sec.Conc != nil {
		sc.conc[sc.nc] = sec.Conc
		sc.nc++
	}
	if rule != nil && rule.Conc > 0 {
		sc.conc[sc.nc] = rule
		sc.nc++
	}
}

// acquire takes a slot of each concurrency limit in sc. It answers a
// request that one of them refuses (429 too_many_in_flight), or that
// --fail-mode closed refuses when the store fails (503), and reports
// false; a key that cannot be built gets its 400. Under --fail-mode
// local the slots are taken in memory, with each limit's local share;
// under open the request goes on without a slot.
func (h *Handler) acquire(w http.ResponseWriter, r *http.Request, sec *ruleset.Section, sc *scratch) bool {
	if sc.nc == 0 {
		return true
	}
	o := &sc.o
	group := func() string { return h.group(sc) }
	tag := sec.App
	if sec.IPTag {
		tag = sec.App + "|" + group()
	}
	reqs := sc.slots[:sc.nc]
next:
	for i, cl := range sc.conc[:sc.nc] {
		reqs[i] = limit.SlotRequest{Key: cl.Key, Tag: tag, Limit: cl.Conc}
		for j, rl := range sc.lims[:sc.n] {
			if rl == cl { // keys built it already
				reqs[i].Key = sc.reqs[j].Key
				continue next
			}
		}
		key, ok := h.counterKey(w, r, cl, sc, group)
		if !ok {
			return false
		}
		reqs[i].Key = key
	}
	permit, full, v := h.acquireSlots(r.Context(), reqs, sc.conc[:sc.nc])
	switch v {
	case failmode.FailedClosed:
		o.StoreError, o.Decision = true, observe.DecisionFailClosed
		refuseUnavailable(w)
		return false
	case failmode.FailedOpen:
		o.StoreError, sc.concFailOpen = true, true
		return true
	case failmode.LocalDecided:
		o.StoreError = true
	}
	if permit == nil {
		cl := sc.conc[full]
		o.Decision = observe.DecisionConcurrencyLimited
		h.inFlight.of(cl.App, cl.API).refused.Add(1)
		w.Header()["Retry-After"] = smallInts[1]
		// The body of a refused request is not read (refusal.go).
		n := cl.Conc
		if v == failmode.LocalDecided {
			n = cl.ConcLocal
		}
		WriteJSON(w, h.limitStatus, inFlightBody{
			Error: "too_many_in_flight", App: cl.App, API: cl.API, Concurrency: n,
			RetryAfterSeconds: 1,
			Message:           "too many requests of this caller are in flight; retry when one has completed",
		})
		return false
	}
	sc.permit = permit
	for i, cl := range sc.conc[:sc.nc] {
		c := h.inFlight.of(cl.App, cl.API)
		c.cur.Add(1)
		sc.inFlight[i] = c
	}
	return true
}

var hdrClose = []string{"close"}

// inFlightBody is the body of a request refused by a concurrency limit.
type inFlightBody struct {
	Error             string `json:"error"`
	App               string `json:"app"`
	API               string `json:"api"`
	Concurrency       int64  `json:"concurrency"`
	RetryAfterSeconds int    `json:"retryAfterSeconds"`
	Message           string `json:"message"`
}

// settle releases the slots of a request the rate limits (or a fail
// mode) refused, so that a refused request holds nothing, and labels a
// request that went on without a slot fail_open.
func (h *Handler) settle(sc *scratch) {
	switch sc.o.Decision {
	case observe.DecisionLimited, observe.DecisionFailClosed:
		h.release(sc)
	case observe.DecisionAllowed, observe.DecisionShadowLimited:
		if sc.concFailOpen {
			sc.o.Decision = observe.DecisionFailOpen
		}
	}
}

// release gives back the slots sc holds, once.
func (h *Handler) release(sc *scratch) {
	if sc.permit == nil {
		return
	}
	p := sc.permit
	sc.permit = nil
	for i, c := range sc.inFlight[:sc.nc] {
		if c != nil {
			c.cur.Add(-1)
			sc.inFlight[i] = nil
		}
	}
	p.Release()
}

// inFlightCount is what this gateway holds and refused of one
// concurrency limit.
type inFlightCount struct {
	cur, refused atomic.Int64
}

// inFlightCounts are the inFlightCounts by (app, api): label values
// bounded by the rule files loaded. A request keeps its count, so that
// a reload releases its slots where it took them.
type inFlightCounts struct {
	m sync.Map // ruleLabels → *inFlightCount
}

func (f *inFlightCounts) of(app, api string) *inFlightCount {
	k := ruleLabels{app, api}
	if c, ok := f.m.Load(k); ok {
		return c.(*inFlightCount)
	}
	c, _ := f.m.LoadOrStore(k, new(inFlightCount))
	return c.(*inFlightCount)
}

var (
	inFlightDesc = prometheus.NewDesc("gateway_in_flight",
		"Requests holding a slot of a concurrency limit in this gateway, by app and rule (api \"\" is the app's concurrency).",
		[]string{"app", "api"}, nil)
	inFlightRefusedDesc = prometheus.NewDesc("gateway_in_flight_refused_total",
		"Requests refused by a concurrency limit (too_many_in_flight), by app and rule (api \"\" is the app's concurrency).",
		[]string{"app", "api"}, nil)
)

// InFlightCollector returns the collector of the handler's concurrency
// metrics, gateway_in_flight and gateway_in_flight_refused_total, for
// the registry of NewMetrics. A limit's series appear once it has been
// used.
func (h *Handler) InFlightCollector() prometheus.Collector { return inFlightCollector{h} }

type inFlightCollector struct{ h *Handler }

func (inFlightCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- inFlightRefusedDesc
}

func (c inFlightCollector) Collect(ch chan<- prometheus.Metric) {
	c.h.inFlight.m.Range(func(k, v any) bool {
		l, n := k.(ruleLabels), v.(*inFlightCount)
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(n.cur.Load()), l.app, l.api)
		ch <- prometheus.MustNewConstMetric(inFlightRefusedDesc, prometheus.CounterValue, float64(n.refused.Load()), l.app, l.api)
		return true
	})
}

// InFlight returns the requests holding a slot of the concurrency limit
// of app and api ("" for the app's) in this gateway.
func (h *Handler) InFlight(app, api string) int64 { return h.inFlight.of(app, api).cur.Load() }
