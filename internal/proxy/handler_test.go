package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

var t0 = gwtest.T0

// upstreamRecorder is a real HTTP upstream that records what it saw.
type upstreamRecorder struct {
	mu      sync.Mutex
	paths   []string
	methods []string
	hosts   []string
	hdrs    []http.Header
}

func (u *upstreamRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.paths = append(u.paths, r.URL.RequestURI())
	u.methods = append(u.methods, r.Method)
	u.hosts = append(u.hosts, r.Host)
	u.hdrs = append(u.hdrs, r.Header.Clone())
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"ok":true}`)
}

func (u *upstreamRecorder) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.paths...)
}

type observed struct {
	mu   sync.Mutex
	out  []observe.Outcome
	more chan struct{} // signalled after each outcome
}

func (o *observed) ObserveRequest(oc *observe.Outcome) {
	o.mu.Lock()
	o.out = append(o.out, *oc)
	o.mu.Unlock()
	select {
	case o.more <- struct{}{}:
	default:
	}
}

// count returns the number of outcomes observed.
func (o *observed) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.out)
}

// waitFor waits until n outcomes were observed: over a real server the
// client has its response before the handler reports its outcome.
func (o *observed) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for o.count() < n {
		select {
		case <-o.more:
		case <-deadline:
			t.Fatalf("outcome %d was never observed", n)
		}
	}
}

// limitsOf returns the limits of an outcome that observed kept.
func limitsOf(o observe.Outcome) []observe.LimitOutcome { return o.Limits() }

func (o *observed) last() observe.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out[len(o.out)-1]
}

type gw struct {
	h     *Handler
	clock *gwtest.Clock
	up    *upstreamRecorder
	obs   *observed
	logs  *gwtest.Log
}

type gwOption func(*HandlerConfig, *UpstreamConfig)

func newGW(t *testing.T, rules string, opts ...gwOption) *gw {
	t.Helper()
	up := &upstreamRecorder{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	return newGWWith(t, rules, srv.URL, up, opts...)
}

// compileRules parses and compiles the rule file rules at t0.
func compileRules(t testing.TB, rules string) *ruleset.Set {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatalf("parsing rules: %v", err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatalf("compiling rules: %v", err)
	}
	return rs
}

func newGWWith(t *testing.T, rules, upstreamURL string, up *upstreamRecorder, opts ...gwOption) *gw {
	t.Helper()
	rs := compileRules(t, rules)
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &gwtest.Log{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	u, _ := url.Parse(upstreamURL)
	ucfg := UpstreamConfig{URL: u, Logger: log}
	c := gwtest.NewClock(t0)
	obs := &observed{more: make(chan struct{}, 1)}
	hcfg := HandlerConfig{Rules: rs, Store: store, Now: c.Now, Logger: log, Observers: []observe.Observer{obs}}
	for _, o := range opts {
		o(&hcfg, &ucfg)
	}
	rp, err := NewUpstream(ucfg)
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Upstream = rp
	h, err := NewHandler(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &gw{h: h, clock: c, up: up, obs: obs, logs: logs}
}

// do sends one request through the handler.
func (g *gw) do(method, target, app string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if app != "" {
		r.Header.Set("X-App-Id", app)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w
}

// basicRules are the rules most tests use (package gwtest).
var basicRules = gwtest.BasicRules

func TestAdmittedIsForwardedWithHeaders(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	w := g.do("GET", "/v1/user/42?x=1", "app-2")
	if w.Code != 200 {
		t.Fatalf("status: got %d, want 200 (body %s)", w.Code, w.Body)
	}
	if got, want := w.Body.String(), `{"ok":true}`; got != want {
		t.Errorf("body: got %q, want %q", got, want)
	}
	if got, want := g.up.seen(), []string{"/v1/user/42?x=1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("upstream saw %v, want %v", got, want)
	}
	for name, want := range map[string]string{
		"RateLimit-Policy": `"app-2/v1/user";q=2;w=10`,
		// The request leaves the window (10 buckets plus the one being
		// filled) after 11s.
		"RateLimit":             `"app-2/v1/user";r=1;t=11`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     "11",
	} {
		if got := w.Header().Get(name); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	if got := g.obs.last(); got.App != "app-2" || got.API != "/v1/user" || got.Decision != observe.DecisionAllowed || got.Status != 200 {
		t.Errorf("outcome: got %+v, want app-2 /v1/user allowed 200", got)
	}
}

func TestLimitedGets429WithTrueRetryAfter(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	for i := 0; i < 2; i++ {
		if w := g.do("GET", "/v1/user", "app-2"); w.Code != 200 {
			t.Fatalf("request %d: got %d, want 200", i, w.Code)
		}
	}
	g.clock.Set(t0.Add(3 * time.Second))
	w := g.do("GET", "/v1/user", "app-2")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: got %d, want 429", w.Code)
	}
	// The two requests at t0 leave the sliding window (10 buckets of 1s,
	// plus the one being filled) at t0+11s: 8s after t0+3s.
	if got, want := w.Header().Get("Retry-After"), "8"; got != want {
		t.Errorf("Retry-After: got %q, want %q", got, want)
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("429 body is not JSON: %v: %s", err, w.Body)
	}
	want := map[string]any{"error": "rate_limited", "app": "app-2", "api": "/v1/user", "limit": 2.0, "window": "10s", "retryAfterSeconds": 8.0}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("body[%q]: got %v, want %v", k, body[k], v)
		}
	}
	if got := w.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type: got %q, want application/json", got)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining: got %q, want 0", got)
	}
	if got := len(g.up.seen()); got != 2 {
		t.Errorf("upstream requests: got %d, want 2", got)
	}
	if got := g.obs.last().Decision; got != observe.DecisionLimited {
		t.Errorf("decision: got %s, want limited", got)
	}

	// A client that waits exactly Retry-After is admitted; a second
	// earlier it is not.
	g.clock.Set(t0.Add(10 * time.Second))
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 429 {
		t.Errorf("1s before Retry-After: got %d, want 429", w.Code)
	}
	g.clock.Set(t0.Add(11 * time.Second))
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 200 {
		t.Errorf("after Retry-After: got %d, want 200", w.Code)
	}
}

func TestAppTotalAndRuleBothApply(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	// The rule (3 per 10s) denies the 4th /v1/user; the denial must not
	// consume the app total (5 per 60s), so two more requests elsewhere
	// still pass.
	for i := 0; i < 3; i++ {
		if w := g.do("GET", "/v1/user", "app-1"); w.Code != 200 {
			t.Fatalf("request %d: got %d", i, w.Code)
		}
	}
	w := g.do("GET", "/v1/user", "app-1")
	if w.Code != 429 {
		t.Fatalf("4th /v1/user: got %d, want 429", w.Code)
	}
	if !strings.Contains(w.Body.String(), `"api":"/v1/user"`) {
		t.Errorf("denying limit: got body %s, want the /v1/user rule", w.Body)
	}
	for i := 0; i < 2; i++ {
		if w := g.do("GET", "/v1/other", "app-1"); w.Code != 200 {
			t.Fatalf("unmatched request %d under the total: got %d, want 200", i, w.Code)
		}
	}
	w = g.do("GET", "/v1/other", "app-1")
	if w.Code != 429 {
		t.Fatalf("6th request: got %d, want 429 from the app total", w.Code)
	}
	if !strings.Contains(w.Body.String(), `"api":""`) || !strings.Contains(w.Body.String(), `"limit":5`) {
		t.Errorf("denying limit: got body %s, want the app total", w.Body)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"app-1";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy: got %q, want %q", got, want)
	}
}

func TestSpecialLimits(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/free
        limit: -1
      - api: /v1/blocked
        limit: 0
      - api: /v1/beta
        limit: 1
        unit: 10
        shadow: true
`)
	for i := 0; i < 50; i++ {
		w := g.do("GET", "/v1/free", "app-1")
		if w.Code != 200 {
			t.Fatalf("unlimited request %d: got %d", i, w.Code)
		}
		if i == 0 && w.Header().Get("RateLimit-Policy") != "" {
			t.Errorf("unlimited rule: got RateLimit-Policy %q, want none", w.Header().Get("RateLimit-Policy"))
		}
	}
	if w := g.do("GET", "/v1/blocked/x", "app-1"); w.Code != 429 {
		t.Errorf("limit 0: got %d, want 429", w.Code)
	}
	for i := 0; i < 3; i++ {
		w := g.do("GET", "/v1/beta", "app-1")
		if w.Code != 200 {
			t.Fatalf("shadow request %d: got %d, want 200", i, w.Code)
		}
		if w.Header().Get("RateLimit-Policy") != "" {
			t.Errorf("shadow rule: got RateLimit-Policy %q, want none", w.Header().Get("RateLimit-Policy"))
		}
		want := observe.DecisionAllowed
		if i > 0 {
			want = observe.DecisionShadowLimited
		}
		if got := g.obs.last().Decision; got != want {
			t.Errorf("shadow request %d: decision %s, want %s", i, got, want)
		}
	}
	if got := len(g.up.seen()); got != 53 {
		t.Errorf("upstream requests: got %d, want 53", got)
	}
}

func TestMethodRules(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	// GET /v1/user/7/orders is the GET-only orders rule (1 per 10s).
	if w := g.do("GET", "/v1/user/7/orders", "app-1"); w.Code != 200 {
		t.Fatalf("first GET: got %d", w.Code)
	}
	if w := g.do("GET", "/v1/user/8/orders", "app-1"); w.Code != 429 {
		t.Errorf("second GET (same rule, other id): got %d, want 429", w.Code)
	}
	// POST falls back to /v1/user (3 per 10s), which has room.
	if w := g.do("POST", "/v1/user/7/orders", "app-1"); w.Code != 200 {
		t.Errorf("POST: got %d, want 200", w.Code)
	}
	if got := g.obs.last().API; got != "/v1/user" {
		t.Errorf("POST matched %q, want /v1/user", got)
	}
}

func TestUnknownCallersPerIP(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.TrustedProxies, _ = ParseTrustedProxies([]string{"192.0.2.0/24"})
	})
	send := func(peer, xff, app string) int {
		r := httptest.NewRequest("GET", "/anything", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if app != "" {
			r.Header.Set("X-App-Id", app)
		}
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		return w.Code
	}
	// Two per client IP. An unconfigured app ID is an unknown caller too.
	for i, want := range []int{200, 200, 429} {
		if got := send("198.51.100.1:1000", "", "no-such-app"); got != want {
			t.Errorf("peer A request %d: got %d, want %d", i, got, want)
		}
	}
	if got := g.obs.last().App; got != "*" {
		t.Errorf("outcome app: got %q, want *", got)
	}
	// An untrusted peer cannot pick another address with X-Forwarded-For.
	if got := send("198.51.100.1:1001", "203.0.113.9", ""); got != 429 {
		t.Errorf("peer A with forged XFF: got %d, want 429", got)
	}
	// Behind the trusted proxy, each forwarded client has its own counter.
	for i, want := range []int{200, 200, 429} {
		if got := send("192.0.2.10:1000", "203.0.113.7, 192.0.2.11", ""); got != want {
			t.Errorf("client C via proxy request %d: got %d, want %d", i, got, want)
		}
	}
	if got := send("192.0.2.10:1000", "203.0.113.8", ""); got != 200 {
		t.Errorf("client D via proxy: got %d, want 200", got)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	tests := []struct {
		name    string
		path    string
		rawPath string
		app     []string
		code    string
	}{
		{name: "empty app ID", path: "/v1/user", app: []string{""}, code: "invalid_app_id"},
		{name: "long app ID", path: "/v1/user", app: []string{strings.Repeat("a", 129)}, code: "invalid_app_id"},
		{name: "bad app ID chars", path: "/v1/user", app: []string{"app 1"}, code: "invalid_app_id"},
		{name: "two app IDs", path: "/v1/user", app: []string{"app-1", "app-2"}, code: "invalid_app_id"},
		{name: "encoded slash", path: "/v1/user/a/b", rawPath: "/v1/user/a%2Fb", code: "invalid_path"},
		{name: "backslash", path: `/v1\user`, code: "invalid_path"},
		{name: "encoded NUL", path: "/v1/\x00", rawPath: "/v1/%00", code: "invalid_path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path, r.URL.RawPath = tt.path, tt.rawPath
			for _, a := range tt.app {
				r.Header.Add("X-App-Id", a)
			}
			w := httptest.NewRecorder()
			g.h.ServeHTTP(w, r)
			if w.Code != 400 {
				t.Fatalf("status: got %d, want 400", w.Code)
			}
			var body struct{ Error, Message string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body is not JSON: %s", w.Body)
			}
			if body.Error != tt.code || body.Message == "" {
				t.Errorf("body: got %+v, want error %q with a message", body, tt.code)
			}
		})
	}
	if got := len(g.up.seen()); got != 0 {
		t.Errorf("upstream requests: got %d, want 0", got)
	}
}

func TestForwardsTheCleanedPath(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 4
        unit: 10
`)
	tests := []struct{ target, want string }{
		{"/v1//user/./42", "/v1/user/42"},
		{"/v1/x/../user/42/", "/v1/user/42/"},
		{"/v1/%75ser/42", "/v1/user/42"},
		{"/v1/user;jsessionid=1/42?q=a%20b", "/v1/user/42?q=a%20b"},
	}
	for _, tt := range tests {
		if w := g.do("GET", tt.target, "app-1"); w.Code != 200 {
			t.Fatalf("%s: got %d", tt.target, w.Code)
		}
		seen := g.up.seen()
		if got := seen[len(seen)-1]; got != tt.want {
			t.Errorf("%s: upstream saw %q, want %q", tt.target, got, tt.want)
		}
		if got := g.obs.last().API; got != "/v1/user" {
			t.Errorf("%s: matched %q, want /v1/user", tt.target, got)
		}
	}
	// All four were counted against app-1's /v1/user (4 per 10s).
	if w := g.do("GET", "/v1/user", "app-1"); w.Code != 429 {
		t.Errorf("after 4 requests: got %d, want 429", w.Code)
	}
}

func TestUnmatchedIsForwarded(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1
`)
	for i := 0; i < 3; i++ {
		if w := g.do("GET", "/v2/thing", "app-1"); w.Code != 200 {
			t.Fatalf("request %d: got %d", i, w.Code)
		}
		if got := g.obs.last().Decision; got != observe.DecisionUnmatched {
			t.Errorf("decision: got %s, want unmatched", got)
		}
	}
	// No "*" section: unknown callers pass unlimited.
	if w := g.do("GET", "/v1/user", ""); w.Code != 200 {
		t.Errorf("unknown caller: got %d, want 200", w.Code)
	}
}

func TestHeaderModes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode          ratelimitheader.Mode
		draft, legacy bool
	}{
		{ratelimitheader.Both, true, true}, {ratelimitheader.Draft, true, false}, {ratelimitheader.Legacy, false, true}, {ratelimitheader.None, false, false},
	} {
		g := newGW(t, basicRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.Headers = tt.mode })
		w := g.do("GET", "/v1/user", "app-2")
		if got := w.Header().Get("RateLimit") != ""; got != tt.draft {
			t.Errorf("mode %d: draft headers present %v, want %v", tt.mode, got, tt.draft)
		}
		if got := w.Header().Get("X-RateLimit-Limit") != ""; got != tt.legacy {
			t.Errorf("mode %d: legacy headers present %v, want %v", tt.mode, got, tt.legacy)
		}
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	t.Run("refused is 502", func(t *testing.T) {
		t.Parallel()
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		g := newGWWith(t, basicRules, dead.URL, nil)
		w := g.do("GET", "/v1/user", "app-1")
		if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), `"error":"upstream_unavailable"`) {
			t.Errorf("got %d %s, want 502 upstream_unavailable", w.Code, w.Body)
		}
	})
	t.Run("slow is 504", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(slow.Close)
		t.Cleanup(func() { close(release) })
		g := newGWWith(t, basicRules, slow.URL, nil, func(_ *HandlerConfig, u *UpstreamConfig) { u.Timeout = 50 * time.Millisecond })
		w := g.do("GET", "/v1/user", "app-1")
		if w.Code != http.StatusGatewayTimeout || !strings.Contains(w.Body.String(), `"error":"upstream_timeout"`) {
			t.Errorf("got %d %s, want 504 upstream_timeout", w.Code, w.Body)
		}
	})
	t.Run("client gone is 499 and not logged", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{})
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		}))
		t.Cleanup(hang.Close)
		g := newGWWith(t, basicRules, hang.URL, nil)
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("GET", "/v1/user", nil).WithContext(ctx)
		r.Header.Set("X-App-Id", "app-1")
		go func() { <-arrived; cancel() }()
		g.h.ServeHTTP(httptest.NewRecorder(), r)
		if got := g.obs.last().Status; got != StatusClientClosed {
			t.Errorf("status: got %d, want 499", got)
		}
		if strings.Contains(g.logs.String(), "upstream request failed") {
			t.Errorf("a client that went away was logged as an upstream failure: %s", g.logs)
		}
	})
}

func TestSetRulesSwapsAtomically(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	if w := g.do("GET", "/v9", "app-3"); w.Code != 200 {
		t.Fatalf("before: got %d", w.Code)
	}
	parsed, err := config.Parse("new.yaml", []byte("configs:\n  - appId: app-3\n    limits:\n      - api: /v9\n        limit: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	g.h.SetRules(rs)
	if w := g.do("GET", "/v9", "app-3"); w.Code != 429 {
		t.Errorf("after swap: got %d, want 429", w.Code)
	}
}

// TestBlockedSaysSo checks the response of a limit of 0: "blocked", with
// nothing that invites a retry (no Retry-After, no reset in the headers),
// and never forwarded.
func TestBlockedSaysSo(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	for range 3 {
		w := g.do("GET", "/v1/blocked/x", "app-1")
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != 429 || body["error"] != "blocked" || body["api"] != "/v1/blocked" || body["limit"] != 0.0 {
			t.Errorf("got %d %v, want 429 blocked on /v1/blocked with limit 0", w.Code, body)
		}
		for _, h := range []string{"Retry-After", "X-Ratelimit-Reset"} {
			if v := w.Header().Get(h); v != "" {
				t.Errorf("%s: %q, want none: no wait helps", h, v)
			}
		}
		if v := w.Header().Get("Ratelimit"); !strings.Contains(v, `"app-1/v1/blocked";r=0`) || strings.Contains(v, `blocked";r=0;t=`) {
			t.Errorf("RateLimit: %q, want r=0 and no t for the blocked limit", v)
		}
	}
	if n := len(g.up.seen()); n != 0 {
		t.Errorf("the upstream saw %d requests, want 0", n)
	}
}

// TestRateLimitHeaderNonASCIIName checks the name of a limit whose rule
// is not ASCII in the draft headers: each byte a structured-field string
// cannot hold is a "?" (ratelimitheader.Quote), as `gateway rls` writes
// it, not left out, which made "/v1/café" read as "/v1/caf", a name
// another rule may have.
func TestRateLimitHeaderNonASCIIName(t *testing.T) {
	t.Parallel()
	g := newGW(t, "configs:\n  - appId: app-1\n    limits:\n      - api: /v1/café\n        limit: 2\n        unit: 60\n")
	w := g.do("GET", "/v1/caf%C3%A9", "app-1")
	if w.Code != 200 {
		t.Fatalf("got %d, want 200", w.Code)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"app-1/v1/caf??";q=2;w=60`; got != want {
		t.Errorf("RateLimit-Policy: got %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"app-1/v1/caf??";r=1;t=`; !strings.HasPrefix(got, want) {
		t.Errorf("RateLimit: got %q, want %q and the reset", got, want)
	}
}
