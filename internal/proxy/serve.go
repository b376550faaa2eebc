package proxy

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/trie"
	"go.opentelemetry.io/otel/trace"
)

// scratch is the per-request state of the handler, pooled so that a
// request allocates none of it: the store's request and result slices
// escape (Store is an interface), and so would the outcome.
type scratch struct {
	// gone is set when the client left while the request waited for the
	// room reserved for it (wait.go).
	gone bool
	// mayWait is set while the request holds one of --max-waiting's
	// places: from just before its decision, which may reserve room
	// ahead, until its wait ends (wait.go).
	mayWait bool
	// rs is the rule set the request is decided on, loaded once.
	rs   *ruleset.Set
	sw   statusWriter
	o    observe.Outcome
	lims [maxLimitsPerRequest]*ruleset.Limit // the limits that apply
	n    int                                 // how many of lims
	reqs [maxLimitsPerRequest]limit.Request
	res  [maxLimitsPerRequest]limit.Result
	// shown and missing are the limits' LimitOutcome.Key and Missing.
	shown   [maxLimitsPerRequest]string
	missing [maxLimitsPerRequest]bool
	// observed is set once the observers are called, so that a panic
	// of one of them does not have them called again.
	observed bool
	// claimsDone is set once the caller's claims were looked for, which
	// happens once per request (jwt.go); they are the outcome's.
	claimsDone bool
	// grp is the client's address group once a key needed it (group).
	grp string
	// The concurrency limits that apply (concurrency.go), their slot
	// requests, the permit of the slots taken and their in-flight
	// counts; concFailOpen is set when the request went on without them.
	conc         [maxLimitsPerRequest]*ruleset.Limit
	nc           int
	slots        [maxLimitsPerRequest]limit.SlotRequest
	permit       limit.Permit
	inFlight     [maxLimitsPerRequest]*inFlightCount
	concFailOpen bool
	// decidedBy is who decided the rate limits (failover.go): under
	// --fail-mode local the memory store, which then also takes the
	// response's charges.
	decidedBy failmode.Verdict
	// alone is where, when decidedBy is failmode.LocalDecided, the
	// charges and releases of the response go so that the fleet counts
	// them too (limit.Alone).
	alone limit.Alone
	// fwd is what the upstream's copy of the request is to differ in
	// (forward.go).
	fwd forward
	// route is the route the request takes, nil for --upstream.
	route *ruleset.Route
	// owed is what the response's cost counts, sent to the store when
	// its headers are written (cost.go).
	owed owed
	// body is the request's body as read for keys (bodykeys.go).
	body bodyKeys
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// ServeHTTP runs a request through the gateway: identify the caller,
// match its rules, decide, then forward or reject; and hands the outcome
// to the observers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isGRPC(r) {
		// Refusals in gRPC's terms (grpc.go).
		gw := &grpcWriter{ResponseWriter: w}
		defer gw.finish()
		w = gw
	}
	sc := scratches.Get().(*scratch)
	defer func() {
		h.release(sc)
		h.waits.leave(sc)
		sc.body.free()
		*sc = scratch{}
		scratches.Put(sc)
	}()
	// Only HTTP/1 waits for an unread body (refusal.go): HTTP/2 resets
	// the stream of one itself, and a flush there would end a gRPC
	// refusal's Trailers-Only response early.
	sc.sw = statusWriter{ResponseWriter: w, unread: r.ContentLength != 0 && r.ProtoMajor == 1}
	sc.body.w, sc.body.timeout, sc.body.budget = &sc.sw, h.bodyTimeout, h.bodyMemory
	sc.o.Start, sc.o.Method = h.now(), r.Method
	sc.o.Span = tracedSpan(r)
	defer func() {
		// ReverseProxy aborts a response whose upstream broke mid-body
		// by panicking with http.ErrAbortHandler, so that the client
		// sees it broken too: the request is observed all the same,
		// with the status its client was sent, and the panic goes on to
		// net/http.
		if p := recover(); p != nil {
			h.release(sc)
			if !sc.observed { // not a panic of an observer
				h.observe(sc)
			}
			panic(p)
		}
	}()
	if sec, ok := h.identify(&sc.sw, r, sc); ok && h.match(&sc.sw, r, sec, sc) && h.verifyClaims(&sc.sw, r, sc) &&
		h.keys(&sc.sw, r, sec, sc) && h.acquire(&sc.sw, r, sec, sc) {
		if sc.n > 0 {
			h.offerWaits(sc)
			h.decide(r, sc)
			if sc.o.Decision != observe.DecisionLimited {
				h.waitReserved(r, sc)
			}
		}
		h.waits.leave(sc)
		h.settle(sc)
		h.respond(&sc.sw, r, sc)
	}
	h.release(sc)
	if sc.sw.unread && !sc.sw.forwarding && sc.sw.status != 0 {
		closeUnread(&sc.sw)
	}
	h.observe(sc)
}

// observe completes the outcome of a served request and hands it to the
// observers.
func (h *Handler) observe(sc *scratch) {
	sc.observed = true
	o := &sc.o
	o.Status = sc.sw.status
	o.Duration = h.now().Sub(o.Start)
	for _, obs := range h.observers {
		obs.ObserveRequest(o)
	}
}

// identify finds the caller's section of the rules: it checks the app ID
// and, for an app with keys, the API key, and marks in sc.fwd the headers
// the upstream has no use for. It answers a refused caller itself (400,
// 401, 403) and reports false. The section is nil for an unknown caller when
// the rules have no "*" section.
func (h *Handler) identify(w http.ResponseWriter, r *http.Request, sc *scratch) (*ruleset.Section, bool) {
	o := &sc.o
	o.App, o.Decision = config.UnknownApp, observe.DecisionInvalid
	var app string
	var err error
	if h.jwt != nil && h.jwt.appClaim != "" {
		var ok bool
		if app, ok = h.appFromToken(w, r, sc); !ok {
			return nil, false
		}
	} else {
		app, err = appID(r, h.appHeader)
	}
	if err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_app_id", err.Error())
		return nil, false
	}
	o.AppID = app
	rs := h.rules.Load()
	sc.rs = rs
	sec, configured := rs.Lookup(app)
	if sec != nil {
		o.App = sec.App
	}
	if !configured && h.rejectUnknown {
		o.Decision = observe.DecisionUnauthorized
		WriteError(w, http.StatusForbidden, "unknown_caller",
			"this gateway serves only configured apps; send a configured app ID in the "+h.appHeader+" header")
		return nil, false
	}
	if configured && len(sec.Keys) > 0 && h.replay == nil {
		if code, msg := h.checkKey(r, sec); code != "" {
			o.Decision = observe.DecisionUnauthorized
			w.Header()["Www-Authenticate"] = []string{h.keyAuth}
			WriteError(w, http.StatusUnauthorized, code, msg)
			return nil, false
		}
		// The key was the gateway's to check; the upstream has no use
		// for it.
		sc.fwd.dropKey = true
	} else if h.replay == nil && rs.Keyed() && h.foreignKey(r, rs) {
		// A configured app's key on a request that is not counted under
		// that app: the upstream might take it as that app's.
		o.Decision = observe.DecisionUnauthorized
		w.Header()["Www-Authenticate"] = []string{h.keyAuth}
		WriteError(w, http.StatusUnauthorized, "invalid_api_key",
			"the API key in the "+h.keyHeader+" header belongs to another app: send it only with the app ID it was issued for")
		return nil, false
	}
	f := &sc.fwd
	f.app, f.key, f.keyed = h.appHeader, h.keyHeader, rs.KeyHeaders()
	switch {
	case !h.forwardApp:
		f.dropApp = true
	case h.jwt != nil && h.jwt.appClaim != "":
		f.setApp, f.appID = true, app // the verified one
	}
	return sec, true
}

// match normalizes the path and collects the limits that apply to it in
// sc: the app total and the most specific rule of the caller's section.
// It answers a path that cannot be normalized with 400 and reports false.
// The upstream receives exactly the path that was matched (sc.fwd), so
// that it cannot see a resource other than the one counted.
func (h *Handler) match(w http.ResponseWriter, r *http.Request, sec *ruleset.Section, sc *scratch) bool {
	o := &sc.o
	clean, err := trie.Normalize(r.URL.EscapedPath())
	if err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_path", err.Error())
		return false
	}
	o.Path = clean
	rs := sc.rs
	if sc.route = rs.Route(r.Host, clean); sc.route != nil {
		o.Route, o.Upstream = sc.route.Name, sc.route.Upstream
	} else if rs.NoRoute() {
		// Refused before anything is counted: it could go nowhere.
		WriteError(w, http.StatusNotFound, "no_route", "no route of the gateway matches this host and path")
		return false
	}
	method, err := h.ruleMethod(r, &sc.fwd)
	if err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_method_override", err.Error())
		return false
	}
	sc.fwd.dropUpgrade = h.upgrades.refused(r)
	o.ClientIP = clientIP(r, h.trusted)
	sc.fwd.realIP = o.ClientIP
	o.Decision = observe.DecisionUnmatched
	if sec != nil {
		if sec.Total != nil {
			sc.lims[sc.n] = sec.Total
			sc.n++
		}
		cl, pattern, ok := sec.Match(method, clean)
		if ok {
			o.API = pattern
			o.Decision = observe.DecisionAllowed
			if cl.Params.Limit != limit.Unlimited {
				sc.lims[sc.n] = cl
				sc.n++
			}
		} else {
			cl = nil
		}
		sc.addConcurrency(sec, cl)
	}
	sc.fwd.path = clean
	return true
}

// keys builds the store requests of the limits in sc: each limit's
// counter key for this request (see "by" in docs/rules.md, "Rule file").
// It answers a request whose key cannot be built (a missing value under
// missing: deny, a value too long or sent twice) with 400 and reports
// false.
func (h *Handler) keys(w http.ResponseWriter, r *http.Request, sec *ruleset.Section, sc *scratch) bool {
	if sc.n == 0 {
		return true
	}
	group := func() string { return h.group(sc) }
	// The tag keeps a request's keys together in one Redis Cluster slot:
	// the app's, or, when every limit of the section is per client
	// address, one of the caller buckets, chosen by the caller, so that
	// unknown callers spread over the cluster (limit.CallerTag); the Redis
	// key budget bounds a flood of them.
	tag := sec.App
	if sec.IPTag {
		tag = limit.CallerTag(group())
	}
	for i, cl := range sc.lims[:sc.n] {
		key, ok := h.counterKey(w, r, cl, sc, group)
		if !ok {
			return false
		}
		q := &sc.reqs[i]
		*q = limit.Request{Key: key, Tag: tag, Params: &cl.Params, Shadow: cl.Shadow, Cost: cl.Cost.Need()}
		if cl.Deferred() {
			q.Act = limit.Hold
		}
		if cl.Cost.Price != nil && !cl.Shadow && !unknownModel(w, r, cl, sc) {
			return false
		}
		if cl.BodyCost() {
			// Its reserve is held until the response ends, or room for
			// min checked (tokens.go).
			var deferred bool
			q.Cost, deferred = bodyNeed(cl, r, sc)
			if bodyRefused(w, sc) {
				return false
			}
			q.Act = limit.Hold
			if deferred {
				q.Act = limit.Defer
			}
		}
		switch cl.Kind {
		case ruleset.KeyIP:
			q.Overflow, sc.shown[i] = cl.Overflow, group()
		case ruleset.KeyAttrs:
			q.Overflow = cl.Overflow
			sc.shown[i], sc.missing[i] = shownKey(cl, group, &sc.o)
		}
	}
	return true
}

// group returns the client's address group, computed once per request
// and only if a key needs it.
func (h *Handler) group(sc *scratch) string {
	if sc.grp == "" {
		sc.grp = h.addrGroup(sc.o.ClientIP)
	}
	return sc.grp
}

// counterKey returns cl's counter key for r: its own for by app or
// global, with the client's address group for by ip, with the values it
// counts by for the others (a claim's from the claims verifyClaims kept
// in sc). It answers a request whose key cannot be built (a missing
// value under missing: deny, a value too long or sent twice) and reports
// false.
func (h *Handler) counterKey(w http.ResponseWriter, r *http.Request, cl *ruleset.Limit, sc *scratch, group func() string) (string, bool) {
	switch cl.Kind {
	case ruleset.KeyIP:
		return cl.Key + "|" + group(), true
	case ruleset.KeyAttrs:
		readKeys(r, cl, sc)
		if bodyRefused(w, sc) {
			return "", false
		}
		key, code, msg := cl.AttrKey(r.URL.RawQuery, group, &sc.o)
		if code != "" {
			sc.o.Decision = observe.DecisionInvalid
			WriteError(w, http.StatusBadRequest, code, msg)
			return "", false
		}
		return key, true
	}
	return cl.Key, true
}

// decide asks the store about the limits in sc and sets the outcome's
// decision: allowed, shadow_limited or limited, with the results in sc;
// or, when the store fails, what --fail-mode made of it (failover.go):
// fail_closed, fail_open, or under local the in-memory store's verdict
// on the scaled limits.
func (h *Handler) decide(r *http.Request, sc *scratch) {
	o := &sc.o
	n := sc.n
	lims, res := sc.lims[:n], sc.res[:n]
	ctx := r.Context()
	if o.Span != nil {
		var span trace.Span
		ctx, span = tracing.StartDecision(ctx)
		defer endDecision(span, sc)
	}
	t0 := time.Now()
	allowed, v, alone := h.allow(ctx, o.Start, sc.reqs[:n], res, lims)
	o.LimiterDuration = time.Since(t0)
	sc.decidedBy, sc.alone = v, alone
	// A decision replaces what an earlier one of the same request (before
	// a wait for room) said of its limits, whoever decides it.
	o.ResetLimits()
	switch v {
	case failmode.FailedClosed:
		o.StoreError, o.Decision = true, observe.DecisionFailClosed
		return
	case failmode.FailedOpen:
		o.StoreError, o.Decision = true, observe.DecisionFailOpen
		return
	case failmode.LocalDecided:
		o.StoreError = true
	}
	o.Decision = observe.DecisionAllowed
	for i, cl := range lims {
		o.AddLimit(observe.LimitOutcome{
			App: cl.App, API: cl.API, Limit: res[i].Limit, Remaining: res[i].Remaining,
			Allowed: res[i].Allowed, Shadow: cl.Shadow, By: cl.By, Key: sc.shown[i], Missing: sc.missing[i],
		})
		if len(cl.Alerts) > 0 {
			l := &o.Limits()[i]
			l.Alerts, l.Params, l.Deferred, l.Plan = cl.Alerts, &cl.Params, cl.Deferred(), cl.Plan
			if sc.reqs[i].Act == limit.Hold {
				l.Reserved = sc.reqs[i].Cost
			}
		}
	}
	if !allowed {
		o.Decision = observe.DecisionLimited
		return
	}
	for i := range res {
		if !res[i].Allowed {
			o.Decision = observe.DecisionShadowLimited
		}
	}
}

// refuseUnavailable answers a request that --fail-mode closed refuses
// because the store failed.
func refuseUnavailable(w http.ResponseWriter) {
	w.Header()["Retry-After"] = smallInts[1]
	WriteError(w, http.StatusServiceUnavailable, "limiter_unavailable",
		"the rate limiter cannot decide right now; retry shortly")
}

// respond answers a decided request: 503 when the store failed and
// --fail-mode is closed, the limited response when a limit denied it, and
// otherwise forwards it, with the rate-limit headers of the limits that
// decided it.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, sc *scratch) {
	o := &sc.o
	switch o.Decision {
	case observe.DecisionFailClosed:
		refuseUnavailable(w)
		return
	case observe.DecisionLimited:
		h.writeHeaders(w.Header(), sc.lims[:len(o.Limits())], sc.res[:len(o.Limits())])
		h.reject(w, sc.route, sc.lims[:len(o.Limits())], sc.res[:len(o.Limits())])
		return
	}
	h.writeHeaders(w.Header(), sc.lims[:len(o.Limits())], sc.res[:len(o.Limits())])
	chargeFixed(sc)
	ctx := r.Context()
	charging := h.startCharging(r, sc)
	if t := h.startMetering(sc); charging || t != nil {
		// What the response cost is settled once it has ended, however
		// it ends (cost.go): deferred, so that a stream broken mid-body
		// is charged too (ReverseProxy panics with http.ErrAbortHandler
		// to abort it), as is a status never written through the writer
		// (499 for a client that went away, 101 for a protocol switch),
		// and the units held are given back.
		defer func() {
			p := recover()
			h.settleCharges(r, sc, t, p != nil || r.Context().Err() != nil)
			if p != nil {
				panic(p)
			}
		}()
	}
	if charging {
		// What the request costs is known only from the upstream's
		// answer: a client that hangs up must not cancel the upstream's
		// request before it answers (cost.go says what an aborted
		// request is charged). Once the response's headers are in, the
		// client leaving cancels it.
		up, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		uc := &upstreamCancel{cancel: cancel}
		defer context.AfterFunc(ctx, uc.clientGone)()
		sc.sw.up, sc.fwd.client = uc, ctx
		ctx = up
	}
	if sc.gone {
		// The client left while it waited for its room (wait.go): not
		// forwarded, and settled as a request whose client left.
		markStatus(w, StatusClientClosed)
		return
	}
	t0 := time.Now()
	// Deferred: ReverseProxy panics to abort a response broken mid-body.
	defer func() {
		o.UpstreamDuration = time.Since(t0)
		if sc.fwd.span != nil { // a response neither answered nor failed
			sc.fwd.span.End()
		}
	}()
	sc.sw.forwarding = true
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// The upstream may answer, and stream, before the body has all
		// arrived: net/http's HTTP/1 server would otherwise read what is
		// left of the body and close it when the response's headers go
		// out, under the reverse proxy still copying it, and the
		// upstream's connection, and the stream, would break
		// (http.ResponseController.EnableFullDuplex; golang/go issue
		// 15527).
		http.NewResponseController(w).EnableFullDuplex()
	}
	out := r.WithContext(context.WithValue(ctx, forwardKey{}, &sc.fwd))
	if sc.body.read {
		out.Body = sc.body.forwardBody(r) // what was read for keys, then the rest
	}
	if sc.route != nil && sc.route.Handler != nil {
		sc.route.Handler.ServeHTTP(w, out)
		return
	}
	h.upstream.ServeHTTP(w, out)
}
