package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/stores"
)

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	current := basicRules
	rules := g.reloader(func() (*config.Rules, error) {
		return config.Parse("rules.yaml", []byte(current))
	})
	var reloads []bool
	rules.onReload = func(ok bool, _ *ruleset.Set) { reloads = append(reloads, ok) }
	admin := NewAdmin(AdminConfig{Rules: rules, Token: "admin-secret"})
	get := func(method, path string) (int, map[string]any) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Authorization", "Bearer admin-secret")
		admin.ServeHTTP(w, r)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %s", method, path, w.Body)
		}
		return w.Code, body
	}

	if code, body := get("GET", "/healthz"); code != 200 || body["status"] != "ok" {
		t.Errorf("/healthz: got %d %v", code, body)
	}
	if code, _ := get("GET", "/readyz"); code != 200 {
		t.Errorf("/readyz: got %d", code)
	}
	code, body := get("GET", "/rules")
	if code != 200 {
		t.Fatalf("/rules: got %d", code)
	}
	sha := g.h.Rules().Source.SHA256
	if body["sha256"] != sha || len(sha) != 64 {
		t.Errorf("/rules sha256: got %v, want %s", body["sha256"], sha)
	}
	if _, ok := body["lastError"]; ok {
		t.Errorf("/rules: lastError present before any failure: %v", body["lastError"])
	}
	// The rule file's setting, by its name: caseSensitive (default false).
	if got, ok := body["caseSensitive"]; !ok || got != false {
		t.Errorf("/rules caseSensitive: got %v (present %v), want false", got, ok)
	}
	if got, ok := body["caseInsensitive"]; ok {
		t.Errorf("/rules shows the old name caseInsensitive: %v", got)
	}
	apps := body["apps"].([]any)
	if len(apps) != 3 || apps[0].(map[string]any)["appId"] != "app-1" {
		t.Errorf("/rules apps: got %v", apps)
	}

	// A bad reload keeps the rules and reports the error.
	current = "configs: [oops"
	if code, body := get("POST", "/rules/reload"); code != http.StatusUnprocessableEntity || body["error"] != "reload_failed" {
		t.Errorf("bad reload: got %d %v", code, body)
	}
	_, body = get("GET", "/rules")
	if body["sha256"] != sha || !strings.Contains(body["lastError"].(string), "rules.yaml") || body["lastErrorAt"] == nil {
		t.Errorf("/rules after bad reload: got sha %v lastError %v at %v", body["sha256"], body["lastError"], body["lastErrorAt"])
	}
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 200 {
		t.Errorf("request after bad reload: got %d, want 200", w.Code)
	}

	// A good reload swaps the rules and clears the error.
	current = "configs:\n  - appId: app-2\n    limits:\n      - api: /v1/user\n        limit: 0\n"
	if code, _ := get("POST", "/rules/reload"); code != 200 {
		t.Errorf("good reload: got %d", code)
	}
	_, body = get("GET", "/rules")
	if body["sha256"] == sha || body["lastError"] != nil {
		t.Errorf("/rules after good reload: got sha %v lastError %v", body["sha256"], body["lastError"])
	}
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 429 {
		t.Errorf("request after good reload: got %d, want 429", w.Code)
	}
	if got, want := len(reloads), 2; got != want || reloads[0] || !reloads[1] {
		t.Errorf("reload hook calls: got %v, want [false true]", reloads)
	}
}

func TestReadyzReportsStoreTrouble(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	admin := NewAdmin(AdminConfig{
		Rules: g.reloader(nil),
		Store: func(context.Context) stores.Health {
			return stores.Health{Store: "redis", Error: "store unreachable"}
		},
	})
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 503 || !strings.Contains(w.Body.String(), "store unreachable") {
		t.Errorf("got %d %s, want 503 with the reason", w.Code, w.Body)
	}
}

// TestAdminReloadNeedsToken checks that POST /rules/reload, the admin
// port's one mutating endpoint, runs only with the configured bearer token,
// is disabled without one; that the reads revealing callers or keys
// (/rules, /top, /usage) need the token when one is configured and are
// open when none is; and that the probes and /metrics stay open.
func TestAdminReloadNeedsToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	tests := []struct {
		name       string
		token      string // AdminConfig.Token
		method     string
		path       string
		auth       string // Authorization header, if any
		wantCode   int
		wantError  string // the JSON error code; "" for a success
		wantBearer string // the WWW-Authenticate header
	}{
		{name: "no token configured", method: "POST", path: "/rules/reload", auth: "Bearer " + token, wantCode: 403, wantError: "admin_disabled"},
		{name: "no credentials", token: token, method: "POST", path: "/rules/reload", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "wrong token", token: token, method: "POST", path: "/rules/reload", auth: "Bearer s3cret-tokeN", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin", error="invalid_token"`},
		{name: "token prefix", token: token, method: "POST", path: "/rules/reload", auth: "Bearer s3cret", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin", error="invalid_token"`},
		{name: "token as basic credentials", token: token, method: "POST", path: "/rules/reload", auth: "Basic " + token, wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "empty bearer", token: token, method: "POST", path: "/rules/reload", auth: "Bearer ", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "right token", token: token, method: "POST", path: "/rules/reload", auth: "Bearer " + token, wantCode: 200},
		{name: "scheme in lower case", token: token, method: "POST", path: "/rules/reload", auth: "bearer " + token, wantCode: 200},
		{name: "healthz without credentials", token: token, method: "GET", path: "/healthz", wantCode: 200},
		{name: "readyz without credentials", token: token, method: "GET", path: "/readyz", wantCode: 200},
		{name: "rules without credentials", token: token, method: "GET", path: "/rules", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "rules with the token", token: token, method: "GET", path: "/rules", auth: "Bearer " + token, wantCode: 200},
		{name: "rules without a token configured", method: "GET", path: "/rules", wantCode: 200},
		{name: "top without credentials", token: token, method: "GET", path: "/top", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "top with a wrong token", token: token, method: "GET", path: "/top", auth: "Bearer nope", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin", error="invalid_token"`},
		{name: "top with the token", token: token, method: "GET", path: "/top", auth: "Bearer " + token, wantCode: 200},
		{name: "top without a token configured", method: "GET", path: "/top", wantCode: 200},
		{name: "usage without credentials", token: token, method: "GET", path: "/usage", wantCode: 401, wantError: "unauthorized", wantBearer: `Bearer realm="gateway admin"`},
		{name: "usage with the token", token: token, method: "GET", path: "/usage", auth: "Bearer " + token, wantCode: 400, wantError: "missing_app"},
		{name: "usage without a token configured", method: "GET", path: "/usage", wantCode: 400, wantError: "missing_app"},
		{name: "metrics without credentials", token: token, method: "GET", path: "/metrics", wantCode: 200},
		{name: "healthz without a token configured", method: "GET", path: "/healthz", wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, basicRules)
			rules := g.reloader(func() (*config.Rules, error) {
				return config.Parse("rules.yaml", []byte(basicRules))
			})
			metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				proxy.WriteJSON(w, http.StatusOK, map[string]string{"metrics": "yes"})
			})
			admin := NewAdmin(AdminConfig{Rules: rules, Token: tt.token, Metrics: metrics, Top: observe.NewTop(observe.TopConfig{}), Usage: &UsageConfig{}})
			r := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			admin.ServeHTTP(w, r)
			if w.Code != tt.wantCode {
				t.Errorf("status: got %d, want %d (%s)", w.Code, tt.wantCode, w.Body)
			}
			var body map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body is not JSON: %s", w.Body)
			}
			if got, _ := body["error"].(string); got != tt.wantError {
				t.Errorf("error: got %q, want %q", got, tt.wantError)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tt.wantBearer {
				t.Errorf("WWW-Authenticate: got %q, want %q", got, tt.wantBearer)
			}
			if msg, _ := body["message"].(string); tt.wantError == "admin_disabled" && !strings.Contains(msg, "--admin-token") {
				t.Errorf("message: got %q, want it to name --admin-token", msg)
			}
		})
	}
}

// TestPprofOnlyWithFlag checks that the profiler, which exposes the
// process's internals, is served only with --pprof.
func TestPprofOnlyWithFlag(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	rules := g.reloader(nil)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/symbol"} {
		for _, on := range []bool{false, true} {
			w := httptest.NewRecorder()
			NewAdmin(AdminConfig{Rules: rules, Pprof: on}).ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if w.Code != want {
				t.Errorf("GET %s with Pprof %v: got %d, want %d", path, on, w.Code, want)
			}
		}
	}
}

// A token from a Secret often ends in a newline; a client's Authorization
// header never can. Both are trimmed, so the two still match.
func TestAdminTokenTrimmed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"s3cret\n", " s3cret ", "s3cret"} {
		got, err := loadAdminToken(in, "")
		if err != nil || got != "s3cret" {
			t.Errorf("loadAdminToken(%q): got %q, %v; want s3cret", in, got, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Upstream, cfg.AdminToken = "http://127.0.0.1:1", " \n"
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted a token of white space only")
	}
}

// TestRedisReadyz checks /readyz on the redis store: it reports the
// store and its breaker, and is not ready only when Redis is unreachable
// and --fail-mode closed refuses requests without it.
func TestRedisReadyz(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, mode := range []failmode.Mode{failmode.Open, failmode.Closed} {
		sc := stores.DefaultConfig()
		sc.Store, sc.RedisURL, sc.FailMode = stores.StoreRedis, srv.URL(), mode
		st, err := stores.New(sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		g := newGW(t, basicRules)
		admin := NewAdmin(AdminConfig{Rules: g.reloader(nil), Store: st.Health})
		readyz := func() (int, readyView) {
			w := httptest.NewRecorder()
			admin.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
			var v readyView
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.Store == nil {
				t.Fatalf("readyz body: %v %s", err, w.Body)
			}
			return w.Code, v
		}
		// The first ping also dials, within the 25ms timeout; on a loaded
		// machine (or just after a restart) that can miss, so wait for the
		// store to be reachable before asserting the healthy state.
		var (
			code int
			v    readyView
		)
		eventually.True(t, 10*time.Second, func() bool {
			code, v = readyz()
			return v.Store.Reachable
		}, "%s: Redis up, but /readyz never reports it reachable: %+v", mode, v.Store)
		if code != 200 || !v.Store.Reachable || v.Store.Circuit != "closed" || v.Store.FailMode != mode.String() {
			t.Errorf("%s, Redis up: got %d %+v", mode, code, *v.Store)
		}
		srv.Stop()
		wantCode := 200
		if mode == failmode.Closed {
			wantCode = 503
		}
		if code, v := readyz(); code != wantCode || v.Store.Reachable || v.Store.Error == "" || v.Store.Serving != (mode != failmode.Closed) {
			t.Errorf("%s, Redis down: got %d %+v, want %d", mode, code, *v.Store, wantCode)
		}
		srv.Restart()
	}
}

// TestAdminRulesShowBy checks that /rules shows each limit's by, its
// own or its app's, and missing where by names a header or query
// parameter.
func TestAdminRulesShowBy(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limit: 10
    limits:
      - {api: /a, limit: 1, by: "header:x-user-id", missing: share}
      - {api: /b, limit: 1}
  - appId: "*"
    limits:
      - {api: /, limit: 1, by: [ip, query:user]}
`
	g := newGW(t, rules)
	rl := g.reloader(func() (*config.Rules, error) { return config.Parse("rules.yaml", []byte(rules)) })
	admin := NewAdmin(AdminConfig{Rules: rl})
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/rules", nil))
	var body struct {
		Apps []struct {
			AppID, By, Missing string
			Limits             []struct{ API, By, Missing string }
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/rules: %v: %s", err, w.Body)
	}
	var got []string
	for _, a := range body.Apps {
		got = append(got, a.AppID+" by="+a.By+" missing="+a.Missing)
		for _, l := range a.Limits {
			got = append(got, a.AppID+l.API+" by="+l.By+" missing="+l.Missing)
		}
	}
	want := []string{
		"app-1 by=app missing=",
		"app-1/a by=header:X-User-Id missing=share",
		"app-1/b by=app missing=",
		"* by=ip missing=",
		"*/ by=ip,query:user missing=ip",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("/rules:\ngot  %q\nwant %q", got, want)
	}
}

func TestAdminRulesShowCalendarUnits(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limit: 1000
    unit: calendar-month
    limits:
      - {api: /a, limit: 10, unit: calendar-day, timezone: Europe/Berlin}
      - {api: /b, limit: 1, unit: 60}
`
	g := newGW(t, rules)
	rl := g.reloader(func() (*config.Rules, error) { return config.Parse("rules.yaml", []byte(rules)) })
	admin := NewAdmin(AdminConfig{Rules: rl})
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/rules", nil))
	type view struct{ API, Unit, Timezone, Algorithm string }
	var body struct {
		Apps []struct {
			Total  view
			Limits []view
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/rules: %v: %s", err, w.Body)
	}
	a := body.Apps[0]
	got := append([]view{a.Total}, a.Limits...)
	want := []view{
		{Unit: "calendar-month", Timezone: "UTC", Algorithm: "fixed_window"},
		{API: "/a", Unit: "calendar-day", Timezone: "Europe/Berlin", Algorithm: "fixed_window"},
		{API: "/b", Unit: "1m0s", Algorithm: "sliding_window"},
	}
	if len(got) != len(want) {
		t.Fatalf("/rules: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("/rules limit %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestAdminListensOnLoopbackByDefault checks the default admin address:
// its reads show rules and callers, so it is not on every interface
// unless a deployment says so.
func TestAdminListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	if got, want := DefaultConfig().AdminListen, "127.0.0.1:9090"; got != want {
		t.Errorf("AdminListen: got %q, want %q", got, want)
	}
}
