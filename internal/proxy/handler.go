package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// Decision is what the gateway did with a request; it is the decision
// label of the request metrics (DESIGN §8).
type Decision string

// The decisions.
const (
	DecisionAllowed       Decision = "allowed"
	DecisionLimited       Decision = "limited"
	DecisionShadowLimited Decision = "shadow_limited"
	DecisionUnmatched     Decision = "unmatched"
	DecisionInvalid       Decision = "invalid"
	DecisionFailOpen      Decision = "fail_open"
	DecisionFailClosed    Decision = "fail_closed"
	// DecisionUnauthorized is a caller refused before any limit: an app
	// with keys named without one of them (401), or an unknown caller
	// under --unknown-callers reject (403).
	DecisionUnauthorized Decision = "unauthorized"
)

// HeaderMode selects which rate-limit headers responses carry.
type HeaderMode uint8

// The header modes of --ratelimit-headers.
const (
	HeadersBoth   HeaderMode = iota // draft and legacy
	HeadersDraft                    // RateLimit-Policy and RateLimit (IETF draft -10)
	HeadersLegacy                   // X-RateLimit-Limit/Remaining/Reset
	HeadersNone
)

// ParseHeaderMode parses a --ratelimit-headers value.
func ParseHeaderMode(s string) (HeaderMode, bool) {
	switch s {
	case "both":
		return HeadersBoth, true
	case "draft":
		return HeadersDraft, true
	case "legacy":
		return HeadersLegacy, true
	case "none":
		return HeadersNone, true
	}
	return 0, false
}

// FailMode is what the handler does with a request when the store fails
// (DESIGN §6: --fail-mode).
type FailMode uint8

// The fail modes.
const (
	// FailOpen admits the request (decision fail_open): a broken limiter
	// must not take the service down (seed 001).
	FailOpen FailMode = iota
	// FailClosed answers 503 limiter_unavailable (decision fail_closed).
	FailClosed
	// FailLocal decides in memory with each limit scaled by the local
	// share (RuleSet's CompileOptions), as if each gateway had its share
	// of the fleet's limit.
	FailLocal
)

// ParseFailMode parses a --fail-mode value.
func ParseFailMode(s string) (FailMode, bool) {
	switch s {
	case "open":
		return FailOpen, true
	case "closed":
		return FailClosed, true
	case "local":
		return FailLocal, true
	}
	return 0, false
}

// String returns the --fail-mode value of m.
func (m FailMode) String() string {
	switch m {
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "open"
}

// maxLimitsPerRequest is how many limits one request can meet: the app
// total and one API rule.
const maxLimitsPerRequest = 2

// Handler is the proxy's request path: identify the caller, normalize and
// match the path, ask the store, then forward or reject. It is safe for
// concurrent use; the rule set is swapped atomically by SetRules.
type Handler struct {
	rules         atomic.Pointer[RuleSet]
	store         limit.Store
	upstream      http.Handler
	appHeader     string
	keyHeader     string
	keyAuth       string // the WWW-Authenticate value of a 401
	rejectUnknown bool
	forwardApp    bool
	trustKeys     bool
	trusted       []netip.Prefix
	limitStatus   int
	headers       HeaderMode
	now           func() time.Time
	log           *slog.Logger
	observers     []Observer
	needIP        bool
	failMode      FailMode
	local         limit.Store
	// lastErrLog is when a store error was last logged (Unix ns): an
	// outage fails every request, and one line a second tells as much.
	lastErrLog atomic.Int64
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Rules is the initial rule set. Required.
	Rules *RuleSet
	// Store decides limits. Required.
	Store limit.Store
	// Upstream forwards admitted requests: the reverse proxy NewUpstream
	// returns (replay passes a handler that only answers). Required.
	Upstream http.Handler
	// AppHeader is the header carrying the caller's app ID. Default
	// "X-App-Id". It is removed before forwarding unless ForwardAppHeader.
	AppHeader string
	// ForwardAppHeader passes AppHeader on to the upstream.
	ForwardAppHeader bool
	// KeyHeader carries the API key of a caller whose app has keys.
	// Default "X-Api-Key". It is removed before forwarding a request
	// whose key the gateway checked.
	KeyHeader string
	// RejectUnknown refuses, with 403, callers that name no configured
	// app (--unknown-callers reject); the "*" section then never applies.
	RejectUnknown bool
	// TrustKeys skips the API key check: for replay, whose access log
	// holds only callers the live gateway let through.
	TrustKeys bool
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// LimitStatus is the status of a limited response. Default 429.
	LimitStatus int
	// Headers selects the rate-limit headers. The zero value is both.
	Headers HeaderMode
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives errors. Default slog.Default().
	Logger *slog.Logger
	// Observers receive every request's outcome.
	Observers []Observer
	// NeedClientIP makes every Outcome carry the client IP (for access
	// logs), not just those of per-IP limits.
	NeedClientIP bool
	// FailMode is what happens to a request when Store fails. The zero
	// value is FailOpen.
	FailMode FailMode
	// Local decides requests under FailLocal, with the limits scaled by
	// the rule set's local share. Required for FailLocal.
	Local limit.Store
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Rules == nil || cfg.Store == nil || cfg.Upstream == nil {
		return nil, errors.New("proxy: NewHandler needs Rules, Store and Upstream")
	}
	if cfg.FailMode == FailLocal && cfg.Local == nil {
		return nil, errors.New("proxy: NewHandler needs a Local store for fail mode local")
	}
	h := &Handler{
		store:         cfg.Store,
		upstream:      cfg.Upstream,
		appHeader:     http.CanonicalHeaderKey(cfg.AppHeader),
		keyHeader:     http.CanonicalHeaderKey(cfg.KeyHeader),
		rejectUnknown: cfg.RejectUnknown,
		forwardApp:    cfg.ForwardAppHeader,
		trustKeys:     cfg.TrustKeys,
		trusted:       cfg.TrustedProxies,
		limitStatus:   cfg.LimitStatus,
		headers:       cfg.Headers,
		now:           cfg.Now,
		log:           cfg.Logger,
		observers:     cfg.Observers,
		needIP:        cfg.NeedClientIP,
		failMode:      cfg.FailMode,
		local:         cfg.Local,
	}
	if h.appHeader == "" {
		h.appHeader = "X-App-Id"
	}
	if h.keyHeader == "" {
		h.keyHeader = "X-Api-Key"
	}
	if h.keyHeader == h.appHeader {
		return nil, fmt.Errorf("proxy: the key header and the app header are both %s; they must differ", h.appHeader)
	}
	h.keyAuth = `ApiKey header="` + h.keyHeader + `"`
	if h.limitStatus == 0 {
		h.limitStatus = http.StatusTooManyRequests
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.rules.Store(cfg.Rules)
	return h, nil
}

// Rules returns the rule set in force.
func (h *Handler) Rules() *RuleSet { return h.rules.Load() }

// SetRules swaps in a new rule set. Requests already past matching finish
// on the set they started with.
func (h *Handler) SetRules(rs *RuleSet) { h.rules.Store(rs) }

// Outcome is what the handler did with one request, for an Observer.
type Outcome struct {
	// App is the metrics label of the caller: its configured app ID, or
	// "*" for every other caller (unknown, or rejected as invalid).
	App string
	// AppID is the app ID the caller sent, if it was valid ("" if none).
	AppID string
	// API is the matched rule pattern, "" if none.
	API string
	// Path is the normalized path that was matched and forwarded; "" if
	// the request was rejected before.
	Path string
	// ClientIP is the caller's address, when it was needed (per-IP
	// limits) or asked for (NeedClientIP).
	ClientIP netip.Addr
	// Decision is what the limiter decided.
	Decision Decision
	// Status is the response status (499 when the client went away).
	Status int
	// Start is when the request reached the handler.
	Start time.Time
	// Duration is the whole request's time in the gateway.
	Duration time.Duration
	// LimiterDuration is the time the store took to decide (0 if it was
	// not asked).
	LimiterDuration time.Duration
	// StoreError reports whether the store failed.
	StoreError bool
	// UpstreamDuration is the time spent forwarding (0 if not forwarded).
	UpstreamDuration time.Duration

	limits [maxLimitsPerRequest]LimitOutcome
	n      int
	sec    *section       // the caller's section, if any
	rule   *compiledLimit // the matched rule, if any
}

// LimitOutcome is one limit's part in a decision.
type LimitOutcome struct {
	App, API  string
	Limit     int64
	Remaining int64
	Allowed   bool
	Shadow    bool
	cl        *compiledLimit
}

// Limits returns the limits the request was decided against.
func (o *Outcome) Limits() []LimitOutcome { return o.limits[:o.n] }

// Observer receives the outcome of every request; metrics and access logs
// hang here. Implementations must be safe for concurrent use and fast, and
// must not keep o after they return: it is reused.
type Observer interface {
	ObserveRequest(r *http.Request, o *Outcome)
}

// scratch is the per-request state of the handler, pooled so that a
// request allocates none of it: the store's request and result slices
// escape (Store is an interface), and so would the outcome.
type scratch struct {
	sw   statusWriter
	o    Outcome
	reqs [maxLimitsPerRequest]limit.Request
	res  [maxLimitsPerRequest]limit.Result
	// observed is set once the observers are called, so that a panic
	// of one of them does not have them called again.
	observed bool
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sc := scratches.Get().(*scratch)
	defer func() {
		*sc = scratch{}
		scratches.Put(sc)
	}()
	if len(h.observers) == 0 {
		h.serve(w, r, h.now(), sc)
		return
	}
	sc.sw = statusWriter{ResponseWriter: w}
	o := &sc.o
	o.Start = h.now()
	defer func() {
		// ReverseProxy aborts a response whose upstream broke mid-body
		// by panicking with http.ErrAbortHandler, so that the client
		// sees it broken too: the request is observed all the same,
		// with the status its client was sent, and the panic goes on to
		// net/http.
		if p := recover(); p != nil {
			if !sc.observed { // not a panic of an observer
				h.observe(r, sc)
			}
			panic(p)
		}
	}()
	h.serve(&sc.sw, r, o.Start, sc)
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

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, now time.Time, sc *scratch) {
	o := &sc.o
	o.App, o.Decision = config.UnknownApp, DecisionInvalid
	app, err := appID(r, h.appHeader)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_app_id", err.Error())
		return
	}
	o.AppID = app
	rs := h.rules.Load()
	sec, configured := rs.lookup(app)
	if sec != nil {
		o.App, o.sec = sec.app, sec
	}
	if !configured && h.rejectUnknown {
		o.Decision = DecisionUnauthorized
		writeError(w, http.StatusForbidden, "unknown_caller",
			"this gateway serves only configured apps; send a configured app ID in the "+h.appHeader+" header")
		return
	}
	if configured && len(sec.keys) > 0 && !h.trustKeys {
		if code, msg := h.checkKey(r, sec); code != "" {
			o.Decision = DecisionUnauthorized
			w.Header()["Www-Authenticate"] = []string{h.keyAuth}
			writeError(w, http.StatusUnauthorized, code, msg)
			return
		}
		// The key was the gateway's to check; the upstream has no use
		// for it.
		delete(r.Header, h.keyHeader)
	}
	if !h.forwardApp {
		delete(r.Header, h.appHeader)
	}
	h.dropAliases(r.Header)
	clean, err := trie.Normalize(r.URL.EscapedPath())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_path", err.Error())
		return
	}
	o.Path = clean
	if h.needIP {
		o.ClientIP = clientIP(r, h.trusted)
	}

	o.Decision = DecisionUnmatched
	var (
		lims [maxLimitsPerRequest]*compiledLimit
		n    int
	)
	if sec != nil {
		if sec.total != nil {
			lims[n] = sec.total
			n++
		}
		if cl, pattern, ok := sec.trie.Match(r.Method, clean); ok {
			o.API, o.rule = pattern, cl
			o.Decision = DecisionAllowed
			if cl.params.Limit != limit.Unlimited {
				lims[n] = cl
				n++
			}
		}
	}
	// Forward exactly the path that was matched and counted.
	r.URL.Path, r.URL.RawPath = clean, ""
	if n == 0 {
		h.forward(w, r, o)
		return
	}
	o.Decision = DecisionAllowed

	reqs, res := &sc.reqs, &sc.res
	// The tag keeps a request's keys together in one Redis Cluster slot:
	// the app's, or for per-IP counters the app's and the caller's, so
	// that unknown callers spread over the cluster.
	tag := sec.app
	if sec.byIP {
		if !o.ClientIP.IsValid() {
			o.ClientIP = clientIP(r, h.trusted)
		}
		ip := o.ClientIP.String()
		tag = sec.app + "|" + ip
		for i := 0; i < n; i++ {
			cl := lims[i]
			reqs[i] = limit.Request{Key: cl.key + "|" + ip, Overflow: cl.overflow, Tag: tag, Params: &cl.params, Shadow: cl.shadow}
		}
	} else {
		for i := 0; i < n; i++ {
			cl := lims[i]
			reqs[i] = limit.Request{Key: cl.key, Tag: tag, Params: &cl.params, Shadow: cl.shadow}
		}
	}
	var t0 time.Time
	if len(h.observers) > 0 {
		t0 = time.Now()
	}
	allowed, err := h.store.Allow(r.Context(), now, reqs[:n], res[:n])
	if err != nil {
		o.StoreError = true
		h.logStoreError(r, err)
		switch h.failMode {
		case FailClosed:
			if len(h.observers) > 0 {
				o.LimiterDuration = time.Since(t0)
			}
			o.Decision = DecisionFailClosed
			w.Header()["Retry-After"] = smallInts[1]
			writeError(w, http.StatusServiceUnavailable, "limiter_unavailable",
				"the rate limiter cannot decide right now; retry shortly")
			return
		case FailLocal:
			for i := 0; i < n; i++ {
				reqs[i].Params = &lims[i].local
			}
			allowed, err = h.local.Allow(r.Context(), now, reqs[:n], res[:n])
		}
	}
	if len(h.observers) > 0 {
		o.LimiterDuration = time.Since(t0)
	}
	if err != nil {
		// Fail open: a broken limiter must not take the service down
		// (seed 001).
		o.Decision = DecisionFailOpen
		h.forward(w, r, o)
		return
	}
	for i := 0; i < n; i++ {
		o.limits[i] = LimitOutcome{
			App: lims[i].app, API: lims[i].api, Limit: res[i].Limit, Remaining: res[i].Remaining,
			Allowed: res[i].Allowed, Shadow: lims[i].shadow, cl: lims[i],
		}
	}
	o.n = n
	h.writeHeaders(w.Header(), lims[:n], res[:n])
	if !allowed {
		o.Decision = DecisionLimited
		h.reject(w, lims[:n], res[:n])
		return
	}
	for i := 0; i < n; i++ {
		if !res[i].Allowed {
			o.Decision = DecisionShadowLimited
		}
	}
	h.forward(w, r, o)
}

// dropAliases removes the headers that spell the app or key header with
// underscores (X_App_Id): the gateway never reads them, but CGI-style
// upstreams (PHP-FPM, some WSGI servers) fold them into the same variable
// as the real header, so they would pass an unchecked app ID or key.
func (h *Handler) dropAliases(hdr http.Header) {
	for k := range hdr {
		if strings.IndexByte(k, '_') >= 0 && (sameUnderscored(k, h.appHeader) || sameUnderscored(k, h.keyHeader)) {
			delete(hdr, k)
		}
	}
}

// sameUnderscored reports whether k is name with any '-' written as '_',
// in any ASCII case.
func sameUnderscored(k, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i := 0; i < len(k); i++ {
		a, b := k[i], name[i]
		if a == '_' {
			a = '-'
		}
		if a|0x20 != b|0x20 && a != b {
			return false
		}
	}
	return true
}

// checkKey checks the API key of a caller naming sec's app: "" when it
// presents one of the app's keys, else the error code and message of a
// 401. Every digest is compared in constant time, so neither the time nor
// which digest is tried first tells a caller anything about the keys.
func (h *Handler) checkKey(r *http.Request, sec *section) (code, msg string) {
	vs := r.Header[h.keyHeader]
	switch {
	case len(vs) == 0 || vs[0] == "":
		return "missing_api_key", "app " + sec.app + " requires an API key in the " + h.keyHeader + " header"
	case len(vs) > 1:
		return "invalid_api_key", "the " + h.keyHeader + " header is sent more than once"
	}
	d := sha256.Sum256([]byte(vs[0]))
	match := 0
	for i := range sec.keys {
		match |= subtle.ConstantTimeCompare(d[:], sec.keys[i][:])
	}
	if match != 1 {
		return "invalid_api_key", "the API key in the " + h.keyHeader + " header is not one of app " + sec.app + "'s keys"
	}
	return "", ""
}

// logStoreError logs a store error, at most once a second, unless the
// caller went away or the circuit breaker is open (the breaker's opening
// was logged).
func (h *Handler) logStoreError(r *http.Request, err error) {
	if r.Context().Err() != nil || errors.Is(err, limit.ErrCircuitOpen) {
		return
	}
	now, last := time.Now().UnixNano(), h.lastErrLog.Load()
	if now-last < int64(time.Second) || !h.lastErrLog.CompareAndSwap(last, now) {
		return
	}
	h.log.Error("limiter failed; deciding by --fail-mode (logged at most once a second)",
		"err", err, "fail_mode", h.failMode.String())
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request, o *Outcome) {
	if len(h.observers) == 0 {
		h.upstream.ServeHTTP(w, r)
		return
	}
	t0 := time.Now()
	// Deferred: ReverseProxy panics to abort a response broken mid-body.
	defer func() { o.UpstreamDuration = time.Since(t0) }()
	h.upstream.ServeHTTP(w, r)
}

// reject writes the limited response for the denying limit with the
// longest wait.
func (h *Handler) reject(w http.ResponseWriter, lims []*compiledLimit, res []limit.Result) {
	worst := -1
	for i := range res {
		if res[i].Allowed || lims[i].shadow {
			continue
		}
		if worst < 0 || res[i].RetryAfter > res[worst].RetryAfter {
			worst = i
		}
	}
	cl, rr := lims[worst], res[worst]
	secs := ceilSeconds(rr.RetryAfter)
	if secs < 1 {
		secs = 1
	}
	w.Header()["Retry-After"] = intHeader(secs)
	writeLimited(w, h.limitStatus, cl, secs)
}

// writeHeaders adds the rate-limit headers of the enforced limits: the
// draft headers list each one, the legacy ones describe the most
// constraining. Shadow limits stay invisible to callers.
func (h *Handler) writeHeaders(hdr http.Header, lims []*compiledLimit, res []limit.Result) {
	if h.headers == HeadersNone {
		return
	}
	most := -1
	for i := range res {
		if lims[i].shadow {
			continue
		}
		if most < 0 || moreConstraining(res[i], res[most]) {
			most = i
		}
	}
	if most < 0 {
		return
	}
	if h.headers == HeadersBoth || h.headers == HeadersDraft {
		hdr["Ratelimit-Policy"] = policyHeader(lims)
		hdr["Ratelimit"] = []string{stateHeader(lims, res)}
	}
	if h.headers == HeadersBoth || h.headers == HeadersLegacy {
		r := res[most]
		if r.Limit == lims[most].params.Limit {
			hdr["X-Ratelimit-Limit"] = lims[most].limitHdr
		} else {
			hdr["X-Ratelimit-Limit"] = intHeader(r.Limit)
		}
		hdr["X-Ratelimit-Remaining"] = intHeader(max(r.Remaining, 0))
		hdr["X-Ratelimit-Reset"] = intHeader(ceilSeconds(r.Reset))
	}
}

// policyHeader returns the RateLimit-Policy value of the enforced limits,
// precomputed for the usual shapes (one limit, or an app total and a rule).
func policyHeader(lims []*compiledLimit) []string {
	switch {
	case len(lims) == 1 && !lims[0].shadow:
		return lims[0].policyHdr
	case len(lims) == 2 && lims[1].pairPolicy != nil:
		return lims[1].pairPolicy
	case len(lims) == 2 && lims[0].shadow:
		return lims[1].policyHdr
	case len(lims) == 2 && lims[1].shadow:
		return lims[0].policyHdr
	}
	return nil
}

// moreConstraining reports whether a leaves less room than b: fewer
// remaining, then a longer wait.
func moreConstraining(a, b limit.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// stateHeader renders the RateLimit value of the enforced limits with one
// allocation.
func stateHeader(lims []*compiledLimit, res []limit.Result) string {
	var buf [256]byte
	b := buf[:0]
	for i, cl := range lims {
		if cl.shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, cl.name...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(res[i].Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(res[i].Reset), 10)
	}
	return string(b)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
