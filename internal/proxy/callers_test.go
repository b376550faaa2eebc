package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

func digest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// keyRules gives app-k two keys and a limit of 2; app-1 has no keys.
var keyRules = `
configs:
  - appId: app-k
    keys:
      - ` + digest("first-key") + `
      - ` + digest("second-key") + `
    limits:
      - api: /v1
        limit: 2
        unit: 10
  - appId: app-1
    limits:
      - api: /v1
        limit: 2
        unit: 10
  - appId: "*"
    limits:
      - api: /
        limit: 1
        unit: 10
`

// errorCode returns the error field of a JSON error body.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var b ruleset.ErrorBody
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("body %q is not a JSON error: %v", body, err)
	}
	if b.Message == "" {
		t.Errorf("error %q has no message", b.Error)
	}
	return b.Error
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules)
	refused := []struct {
		name string
		hdr  []string
		code string
	}{
		{"no key", nil, "missing_api_key"},
		{"empty key", []string{"X-Api-Key", ""}, "missing_api_key"},
		{"wrong key", []string{"X-Api-Key", "third-key"}, "invalid_api_key"},
		{"a digest sent as the key", []string{"X-Api-Key", digest("first-key")}, "invalid_api_key"},
		{"a key of another case", []string{"X-Api-Key", "FIRST-KEY"}, "invalid_api_key"},
		{"a prefix of a key", []string{"X-Api-Key", "first-ke"}, "invalid_api_key"},
		{"two keys, one good", []string{"X-Api-Key", "first-key", "X-Api-Key", "third-key"}, "invalid_api_key"},
		{"key in another header", []string{"Authorization", "first-key"}, "missing_api_key"},
	}
	for _, tt := range refused {
		w := g.do("GET", "/v1/x", "app-k", tt.hdr...)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", tt.name, w.Code)
			continue
		}
		if got := errorCode(t, w.Body.Bytes()); got != tt.code {
			t.Errorf("%s: error %q, want %q", tt.name, got, tt.code)
		}
		if got := w.Header().Get("WWW-Authenticate"); got != `ApiKey header="X-Api-Key"` {
			t.Errorf("%s: WWW-Authenticate %q", tt.name, got)
		}
		if o := g.obs.last(); o.Decision != observe.DecisionUnauthorized || o.App != "app-k" {
			t.Errorf("%s: outcome %s for app %q, want unauthorized for app-k", tt.name, o.Decision, o.App)
		}
	}
	if n := len(g.up.seen()); n != 0 {
		t.Fatalf("the upstream saw %d refused requests", n)
	}

	// Refused requests were not counted: both keys get the app's limit
	// of 2 between them, then 429.
	for i, key := range []string{"first-key", "second-key", "first-key"} {
		want := http.StatusOK
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if w := g.do("GET", "/v1/x", "app-k", "X-Api-Key", key); w.Code != want {
			t.Errorf("request %d with a good key: status %d, want %d", i, w.Code, want)
		}
	}
	// Neither the key nor the app header reached the upstream.
	g.up.mu.Lock()
	defer g.up.mu.Unlock()
	if len(g.up.hdrs) != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", len(g.up.hdrs))
	}
	for _, h := range g.up.hdrs {
		if v, ok := h["X-Api-Key"]; ok {
			t.Errorf("the upstream saw the API key %q", v)
		}
		if v, ok := h["X-App-Id"]; ok {
			t.Errorf("the upstream saw the app header %q", v)
		}
	}
}

// An app without keys neither asks for one nor takes a key header that
// belongs to the upstream.
func TestKeyHeaderOfAppsWithoutKeysIsForwarded(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules)
	if w := g.do("GET", "/v1/x", "app-1", "X-Api-Key", "upstream-key"); w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", w.Code)
	}
	g.up.mu.Lock()
	defer g.up.mu.Unlock()
	if got := g.up.hdrs[0].Get("X-Api-Key"); got != "upstream-key" {
		t.Errorf("the upstream saw X-Api-Key %q, want upstream-key", got)
	}
}

func TestKeyHeaderFlag(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.KeyHeader = "x-gateway-key" })
	if w := g.do("GET", "/v1/x", "app-k", "X-Api-Key", "first-key"); w.Code != http.StatusUnauthorized {
		t.Errorf("key in X-Api-Key: status %d, want 401", w.Code)
	}
	if w := g.do("GET", "/v1/x", "app-k", "X-Gateway-Key", "first-key"); w.Code != http.StatusOK {
		t.Errorf("key in X-Gateway-Key: status %d, want 200", w.Code)
	}
	if _, err := NewHandler(HandlerConfig{Rules: g.h.Rules(), Store: g.h.failover.Store(), Upstream: g.h.upstream, KeyHeader: "x-app-id"}); err == nil {
		t.Error("NewHandler accepted a key header that is the app header")
	}
}

func TestForwardAppHeader(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.ForwardAppHeader = true })
	if w := g.do("GET", "/v1/x", "app-1"); w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", w.Code)
	}
	g.up.mu.Lock()
	defer g.up.mu.Unlock()
	if got := g.up.hdrs[0].Get("X-App-Id"); got != "app-1" {
		t.Errorf("the upstream saw X-App-Id %q, want app-1", got)
	}
}

func TestUnknownCallers(t *testing.T) {
	t.Parallel()
	reject := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.RejectUnknown = true })
	allow := newGW(t, keyRules)
	for _, app := range []string{"", "app-9", "APP-1"} {
		w := reject.do("GET", "/v1/x", app)
		if w.Code != http.StatusForbidden {
			t.Errorf("reject, app %q: status %d, want 403", app, w.Code)
		} else if got := errorCode(t, w.Body.Bytes()); got != "unknown_caller" {
			t.Errorf("reject, app %q: error %q, want unknown_caller", app, got)
		}
		if o := reject.obs.last(); o.Decision != observe.DecisionUnauthorized || o.App != config.UnknownApp {
			t.Errorf("reject, app %q: outcome %s for app %q", app, o.Decision, o.App)
		}
	}
	if n := len(reject.up.seen()); n != 0 {
		t.Errorf("the upstream saw %d rejected callers", n)
	}
	if w := reject.do("GET", "/v1/x", "app-1"); w.Code != http.StatusOK {
		t.Errorf("reject, configured app: status %d, want 200", w.Code)
	}
	// A configured app with keys still needs its key.
	if w := reject.do("GET", "/v1/x", "app-k"); w.Code != http.StatusUnauthorized {
		t.Errorf("reject, app-k without a key: status %d, want 401", w.Code)
	}
	// allow: the "*" section limits them (1 per client IP).
	if w := allow.do("GET", "/v1/x", "app-9"); w.Code != http.StatusOK {
		t.Errorf("allow, first unknown request: status %d, want 200", w.Code)
	}
	if w := allow.do("GET", "/v1/x", ""); w.Code != http.StatusTooManyRequests {
		t.Errorf("allow, second unknown request: status %d, want 429", w.Code)
	}
}

// Keys come from the rule file, so a reload adds and revokes them.
func TestKeysReload(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules)
	if w := g.do("GET", "/v1/x", "app-k", "X-Api-Key", "first-key"); w.Code != http.StatusOK {
		t.Fatalf("before the reload: status %d, want 200", w.Code)
	}
	parsed, err := config.Parse("rules.yaml", []byte(`
configs:
  - appId: app-k
    keys: [`+digest("new-key")+`]
    limits:
      - {api: /v1, limit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	g.h.SetRules(rs)
	if w := g.do("GET", "/v1/x", "app-k", "X-Api-Key", "first-key"); w.Code != http.StatusUnauthorized {
		t.Errorf("a revoked key: status %d, want 401", w.Code)
	}
	if w := g.do("GET", "/v1/x", "app-k", "X-Api-Key", "new-key"); w.Code != http.StatusOK {
		t.Errorf("a new key: status %d, want 200", w.Code)
	}
}

func TestUnauthorizedMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := observe.NewMetrics(observe.MetricsConfig{Registry: reg, Store: "memory"})
	g := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.RejectUnknown = true
		h.Observers = append(h.Observers, m)
	})
	g.do("GET", "/v1/x", "app-k")
	g.do("GET", "/v1/x", "app-k", "X-Api-Key", "nope")
	g.do("GET", "/v1/x", "stranger")
	if got := metric(m, "gateway_requests_total", "app", "app-k", "api", "", "decision", "unauthorized"); got != 2 {
		t.Errorf("requests{app-k, unauthorized} = %v, want 2", got)
	}
	if got := metric(m, "gateway_requests_total", "app", "*", "api", "", "decision", "unauthorized"); got != 1 {
		t.Errorf(`requests{"*", unauthorized} = %v, want 1`, got)
	}
}

// Headers that spell the app or key header with underscores are dropped:
// a CGI-style upstream would read them as the real ones, unchecked.
func TestUnderscoreAliasesDropped(t *testing.T) {
	t.Parallel()
	g := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.ForwardAppHeader = true })
	if w := g.do("GET", "/v1/x", "", "X_App_Id", "app-k", "x_api_key", "guess", "X_Other", "kept"); w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200 (an unknown caller)", w.Code)
	}
	if o := g.obs.last(); o.App != config.UnknownApp {
		t.Errorf("the caller was taken for app %q; the alias must not name an app", o.App)
	}
	g.up.mu.Lock()
	defer g.up.mu.Unlock()
	h := g.up.hdrs[0]
	for k := range h {
		if sameUnderscored(k, "X-App-Id") || sameUnderscored(k, "X-Api-Key") {
			t.Errorf("the upstream saw %s: %q", k, h[k])
		}
	}
	if h.Get("X_Other") != "kept" {
		t.Errorf("an unrelated underscore header was dropped: %v", h)
	}
}

// panicky is an observer that panics once, after counting.
type panicky struct{ calls int }

func (p *panicky) ObserveRequest(*observe.Outcome) {
	p.calls++
	if p.calls == 1 {
		panic("observer failed")
	}
}

// A panicking observer is not called again by the handler's recover.
func TestObserverPanicObservedOnce(t *testing.T) {
	t.Parallel()
	p := &panicky{}
	g := newGW(t, keyRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.Observers = []observe.Observer{p} })
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the observer's panic was swallowed")
			}
		}()
		g.do("GET", "/v1/x", "app-1")
	}()
	if p.calls != 1 {
		t.Errorf("the observer was called %d times for one request, want 1", p.calls)
	}
}
