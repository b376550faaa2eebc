package proxy

import (
	"cmp"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// scratch is the per-request state of the handler, pooled so that a
// request allocates none of it: the store's request and result slices
// escape (Store is an interface), and so would the outcome.
type scratch struct {
	// rs is the rule set the request is decided on, loaded once.
	rs   *RuleSet
	sw   statusWriter
	o    Outcome
	lims [maxLimitsPerRequest]*compiledLimit // the limits that apply
	n    int                                 // how many of lims
	reqs [maxLimitsPerRequest]limit.Request
	res  [maxLimitsPerRequest]limit.Result
	// shown and missing are the limits' LimitOutcome.Key and Missing.
	shown   [maxLimitsPerRequest]string
	missing [maxLimitsPerRequest]bool
	// observed is set once the observers are called, so that a panic
	// of one of them does not have them called again.
	observed bool
	// jwtDone is set once the caller's token was looked at; its claims
	// are the outcome's.
	jwtDone bool
	// grp is the client's address group once a key needed it (group).
	grp string
	// The concurrency limits that apply (concurrency.go), their slot
	// requests, the permit of the slots taken and their in-flight
	// counts; concFailOpen is set when the request went on without them.
	conc         [maxLimitsPerRequest]*compiledLimit
	nc           int
	slots        [maxLimitsPerRequest]limit.SlotRequest
	permit       limit.Permit
	inFlight     [maxLimitsPerRequest]*inFlightCount
	concFailOpen bool
	// local is set when the memory store decided under --fail-mode
	// local, which then also takes the response's charges.
	local bool
	// fwd is what the upstream's copy of the request is to differ in
	// (forward.go).
	fwd forward
	// route is the route the request takes, nil for --upstream.
	route *route
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
		*sc = scratch{}
		scratches.Put(sc)
	}()
	// Only HTTP/1 waits for an unread body (refusal.go): HTTP/2 resets
	// the stream of one itself, and a flush there would end a gRPC
	// refusal's Trailers-Only response early.
	sc.sw = statusWriter{ResponseWriter: w, unread: r.ContentLength != 0 && r.ProtoMajor == 1}
	sc.o.Start = h.now()
	defer func() {
		// ReverseProxy aborts a response whose upstream broke mid-body
		// by panicking with http.ErrAbortHandler, so that the client
		// sees it broken too: the request is observed all the same,
		// with the status its client was sent, and the panic goes on to
		// net/http.
		if p := recover(); p != nil {
			h.release(sc)
			if !sc.observed { // not a panic of an observer
				h.observe(r, sc)
			}
			panic(p)
		}
	}()
	if sec, ok := h.identify(&sc.sw, r, sc); ok && h.match(&sc.sw, r, sec, sc) && h.keys(&sc.sw, r, sec, sc) &&
		h.acquire(&sc.sw, r, sec, sc) {
		if sc.n > 0 {
			h.decide(r, sc)
			if sc.o.Decision == DecisionLimited {
				h.waitForRoom(r, sc)
			}
		}
		h.settle(sc)
		h.respond(&sc.sw, r, sc)
	}
	h.release(sc)
	if sc.sw.unread && !sc.sw.forwarding && sc.sw.status != 0 {
		closeUnread(&sc.sw)
	}
	h.observe(r, sc)
}

// observe completes the outcome of a served request and hands it to the
// observers.
func (h *Handler) observe(r *http.Request, sc *scratch) {
	sc.observed = true
	o := &sc.o
	o.Status = sc.sw.status
	o.Duration = h.now().Sub(o.Start)
	for _, obs := range h.observers {
		obs.ObserveRequest(r, o)
	}
}

// identify finds the caller's section of the rules: it checks the app ID
// and, for an app with keys, the API key, and marks in sc.fwd the headers
// the upstream has no use for. It answers a refused caller itself (400,
// 401, 403) and reports false. The section is nil for an unknown caller when
// the rules have no "*" section.
func (h *Handler) identify(w http.ResponseWriter, r *http.Request, sc *scratch) (*section, bool) {
	o := &sc.o
	o.App, o.Decision = config.UnknownApp, DecisionInvalid
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
	sec, configured := rs.lookup(app)
	if sec != nil {
		o.App = sec.app
	}
	if !configured && h.rejectUnknown {
		o.Decision = DecisionUnauthorized
		WriteError(w, http.StatusForbidden, "unknown_caller",
			"this gateway serves only configured apps; send a configured app ID in the "+h.appHeader+" header")
		return nil, false
	}
	if configured && len(sec.keys) > 0 && !h.trustKeys {
		if code, msg := h.checkKey(r, sec); code != "" {
			o.Decision = DecisionUnauthorized
			w.Header()["Www-Authenticate"] = []string{h.keyAuth}
			WriteError(w, http.StatusUnauthorized, code, msg)
			return nil, false
		}
		// The key was the gateway's to check; the upstream has no use
		// for it.
		sc.fwd.dropKey = true
	} else if !h.trustKeys && rs.keyed && h.foreignKey(r, rs) {
		// A configured app's key on a request that is not counted under
		// that app: the upstream might take it as that app's.
		o.Decision = DecisionUnauthorized
		w.Header()["Www-Authenticate"] = []string{h.keyAuth}
		WriteError(w, http.StatusUnauthorized, "invalid_api_key",
			"the API key in the "+h.keyHeader+" header belongs to another app: send it only with the app ID it was issued for")
		return nil, false
	}
	f := &sc.fwd
	f.app, f.key, f.keyed = h.appHeader, h.keyHeader, rs.keyHeaders
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
func (h *Handler) match(w http.ResponseWriter, r *http.Request, sec *section, sc *scratch) bool {
	o := &sc.o
	clean, err := trie.Normalize(r.URL.EscapedPath())
	if err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_path", err.Error())
		return false
	}
	o.Path = clean
	rs := sc.rs
	if sc.route = rs.routes.match(r.Host, clean); sc.route != nil {
		o.Route, o.Upstream = sc.route.name, sc.route.upstream
	} else if rs.routes != nil && rs.routes.noRoute {
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
	o.Decision = DecisionUnmatched
	if sec != nil {
		if sec.total != nil {
			sc.lims[sc.n] = sec.total
			sc.n++
		}
		cl, pattern, ok := sec.match(method, clean)
		if ok {
			o.API = pattern
			o.Decision = DecisionAllowed
			if cl.params.Limit != limit.Unlimited {
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
func (h *Handler) keys(w http.ResponseWriter, r *http.Request, sec *section, sc *scratch) bool {
	if sc.n == 0 {
		return true
	}
	group := func() string { return h.group(sc) }
	// The tag keeps a request's keys together in one Redis Cluster slot:
	// the app's, or, when every limit of the section is per client
	// address, one of the caller buckets that hold the Redis key budget,
	// chosen by the caller, so that unknown callers spread over the
	// cluster and a flood of them is bounded (limit.CallerTag).
	tag := sec.app
	if sec.ipTag {
		tag = limit.CallerTag(group())
	}
	for i, cl := range sc.lims[:sc.n] {
		key, ok := h.counterKey(w, r, cl, sc, group)
		if !ok {
			return false
		}
		q := &sc.reqs[i]
		*q = limit.Request{Key: key, Tag: tag, Params: &cl.params, Shadow: cl.shadow, Cost: cl.cost.Need(), Hold: cl.deferred()}
		if cl.bodyCost() {
			// Its reserve is held until the response ends, or room for
			// min checked (tokens.go).
			var deferred bool
			q.Cost, deferred = cl.bodyNeed(r)
			q.Hold, q.Defer = !deferred, deferred
		}
		switch cl.kind {
		case keyIP:
			q.Overflow, sc.shown[i] = cl.overflow, group()
		case keyAttrs:
			q.Overflow = cl.overflow
			sc.shown[i], sc.missing[i] = shownKey(r, cl, group, sc.o.claimValue)
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
// counts by for the others; a claim's value only once the caller's token
// is verified. It answers a request whose key cannot be built (a missing
// value under missing: deny, a value too long or sent twice, a token that
// does not verify) and reports false.
func (h *Handler) counterKey(w http.ResponseWriter, r *http.Request, cl *compiledLimit, sc *scratch, group func() string) (string, bool) {
	if cl.claims && h.jwt != nil && !h.verifyCaller(w, r, sc, false) {
		return "", false
	}
	if cl.claims && h.replayClaims != nil && !sc.jwtDone {
		sc.o.claims, sc.jwtDone = h.replayClaims(r), true
	}
	switch cl.kind {
	case keyIP:
		return cl.key + "|" + group(), true
	case keyAttrs:
		key, code, msg := attrKey(r, cl, group, sc.o.claimValue)
		if code != "" {
			sc.o.Decision = DecisionInvalid
			WriteError(w, http.StatusBadRequest, code, msg)
			return "", false
		}
		return key, true
	}
	return cl.key, true
}

// decide asks the store about the limits in sc and sets the outcome's
// decision: allowed, shadow_limited or limited, with the results in sc;
// or, when the store fails, what --fail-mode says: fail_closed, fail_open,
// or under local the in-memory store's verdict on the scaled limits.
func (h *Handler) decide(r *http.Request, sc *scratch) {
	o := &sc.o
	n := sc.n
	lims, reqs, res := sc.lims[:n], sc.reqs[:n], sc.res[:n]
	o.Decision = DecisionAllowed
	t0 := time.Now()
	allowed, err := h.store.Allow(r.Context(), o.Start, reqs, res)
	if err != nil {
		o.StoreError = true
		h.logStoreError(r, err)
		switch h.failMode {
		case FailClosed:
			o.LimiterDuration = time.Since(t0)
			o.Decision = DecisionFailClosed
			return
		case FailLocal:
			for i := range reqs {
				reqs[i].Params = &lims[i].local
			}
			var lerr error
			allowed, lerr = h.local.Allow(r.Context(), o.Start, reqs, res)
			if lerr == nil && allowed {
				// The fleet counts it once: Redis may have counted the
				// call it did not answer in time, else it is written back.
				limit.AdmittedLocally(err)
			}
			err = lerr
			sc.local = true
		}
	}
	o.LimiterDuration = time.Since(t0)
	if err != nil {
		// Fail open: a broken limiter must not take the service down.
		o.Decision = DecisionFailOpen
		return
	}
	for i, cl := range lims {
		o.limits[i] = LimitOutcome{
			App: cl.app, API: cl.api, Limit: res[i].Limit, Remaining: res[i].Remaining,
			Allowed: res[i].Allowed, Shadow: cl.shadow, By: cl.by, Key: sc.shown[i], Missing: sc.missing[i],
		}
	}
	o.n = n
	if !allowed {
		o.Decision = DecisionLimited
		return
	}
	for i := range res {
		if !res[i].Allowed {
			o.Decision = DecisionShadowLimited
		}
	}
}

// respond answers a decided request: 503 when the store failed and
// --fail-mode is closed, the limited response when a limit denied it, and
// otherwise forwards it, with the rate-limit headers of the limits that
// decided it.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, sc *scratch) {
	o := &sc.o
	switch o.Decision {
	case DecisionFailClosed:
		w.Header()["Retry-After"] = smallInts[1]
		WriteError(w, http.StatusServiceUnavailable, "limiter_unavailable",
			"the rate limiter cannot decide right now; retry shortly")
		return
	case DecisionLimited:
		h.writeHeaders(w.Header(), sc.lims[:o.n], sc.res[:o.n])
		h.reject(w, sc.lims[:o.n], sc.res[:o.n])
		return
	}
	h.writeHeaders(w.Header(), sc.lims[:o.n], sc.res[:o.n])
	chargeFixed(sc)
	ctx := r.Context()
	if h.startCharging(r, sc) {
		// A status never written through the writer (499 for a client
		// that went away, 101 for a protocol switch) is charged here,
		// and the units held are given back however the request ends.
		defer func() {
			if sc.sw.charge != nil {
				sc.sw.charge(cmp.Or(sc.sw.status, StatusClientClosed))
			}
		}()
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
	if t := h.startMetering(sc); t != nil {
		// Deferred, so that a stream broken mid-body is charged too:
		// ReverseProxy panics (http.ErrAbortHandler) to abort it.
		defer func() {
			p := recover()
			h.settleTokens(r, sc, t, p != nil || r.Context().Err() != nil)
			if p != nil {
				panic(p)
			}
		}()
	}
	t0 := time.Now()
	// Deferred: ReverseProxy panics to abort a response broken mid-body.
	defer func() { o.UpstreamDuration = time.Since(t0) }()
	sc.sw.forwarding = true
	out := r.WithContext(context.WithValue(ctx, forwardKey{}, &sc.fwd))
	if sc.route != nil && sc.route.handler != nil {
		sc.route.handler.ServeHTTP(w, out)
		return
	}
	h.upstream.ServeHTTP(w, out)
}
