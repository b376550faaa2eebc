package server

import (
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
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

const usageRules = `
plans:
  - name: gold
    limits:
      - {api: /v1/search, limit: 5, unit: 60, algorithm: fixed_window}
configs:
  - appId: acme
    plan: gold
    limit: 100
    unit: 3600
    algorithm: fixed_window
    limits:
      - {api: /v1/chat, limit: 3, unit: 60, algorithm: fixed_window, lockSeconds: 600}
      - {api: /v1/ip, limit: 3, unit: 60, algorithm: fixed_window, by: ip}
`

// usageGW is a gateway on store with the admin port's usage API.
func usageGW(t *testing.T, store limit.Store, reset limit.Resetter) (*gw, http.Handler) {
	t.Helper()
	return usageGWOf(t, usageRules, func(http.ResponseWriter, *http.Request) {}, store, reset)
}

// usageGWOf is a gateway of the rule file text on store in front of an
// upstream that answers with up, with the admin port's usage API.
func usageGWOf(t *testing.T, text string, up http.HandlerFunc, store limit.Store, reset limit.Resetter) (*gw, http.Handler) {
	t.Helper()
	g := newGW(t, text)
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	rp, _ := proxy.NewUpstream(proxy.UpstreamConfig{URL: u})
	parsed, err := config.Parse("rules.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := ruleset.Compile(parsed, t0)
	g.h, err = proxy.NewHandler(proxy.HandlerConfig{Rules: rs, Store: store, Upstream: rp, Now: g.clock.Now, Logger: g.log})
	if err != nil {
		t.Fatal(err)
	}
	rules := g.reloader(func() (*config.Rules, error) { return parsed, nil })
	admin := NewAdmin(AdminConfig{Rules: rules, Token: "tok", Usage: &UsageConfig{Store: store, Resetter: reset, Now: g.clock.Now, Logger: slog.New(slog.DiscardHandler)}})
	return g, admin
}

func adminDo(t *testing.T, admin http.Handler, method, target, auth string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if auth != "" {
		r.Header.Set("Authorization", "Bearer "+auth)
	}
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, r)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %s", method, target, w.Body)
	}
	return w.Code, body
}

// usedOf returns the used count of the limit on api in a GET /usage body.
func usedOf(t *testing.T, body map[string]any, api string) any {
	t.Helper()
	lims, _ := body["limits"].([]any)
	for _, l := range lims {
		m := l.(map[string]any)
		if m["api"] == api {
			return m["used"]
		}
	}
	t.Fatalf("no limit on %q in %v", api, body)
	return nil
}

func TestUsageAPI(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var store limit.Store
			var reset limit.Resetter
			clock := gwtest.NewClock(t0)
			if kind == "redis" {
				red, err := redisstore.New(redisstoretest.WithDecisionClock(redisstore.Config{URL: redistest.Start(t).URL(), Timeout: 5 * time.Second, DenyCacheSize: -1}, clock.Now))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { red.Close() })
				store, reset = red, red
			} else {
				mem, _ := limit.NewMemory(limit.MemoryConfig{})
				store, reset = mem, mem
			}
			g, admin := usageGW(t, store, reset)
			g.clock = clock
			for range 4 { // the fourth is refused and locks /v1/chat out
				g.do("GET", "/v1/chat", "acme")
			}
			g.do("GET", "/v1/search", "acme")
			// The gateway has a token: reads of counters need it too.
			if code, _ := adminDo(t, admin, "GET", "/usage?app=acme", ""); code != 401 {
				t.Errorf("GET /usage without the token: got %d, want 401", code)
			}
			code, body := adminDo(t, admin, "GET", "/usage?app=acme", "tok")
			if code != 200 || body["plan"] != "gold" {
				t.Fatalf("GET /usage: %d %v", code, body)
			}
			for api, want := range map[string]float64{"": 4, "/v1/chat": 3, "/v1/search": 1} {
				if got := usedOf(t, body, api); got != want {
					t.Errorf("used of %q: got %v, want %v", api, got, want)
				}
			}
			if got := usedOf(t, body, "/v1/ip"); got != nil {
				t.Errorf("a per-client limit read without key: used %v, want none", got)
			}
			// Reading counts nothing: a second read gives the same.
			if _, again := adminDo(t, admin, "GET", "/usage?app=acme", "tok"); usedOf(t, again, "/v1/chat") != 3.0 || usedOf(t, again, "") != 4.0 {
				t.Errorf("a second read: %v", again)
			}
			g.do("GET", "/v1/ip", "acme")
			if _, b := adminDo(t, admin, "GET", "/usage?app=acme&key=192.0.2.1", "tok"); usedOf(t, b, "/v1/ip") != 1.0 {
				t.Errorf("per-client limit with key: %v", b)
			}

			// Reset needs the token.
			if code, b := adminDo(t, admin, "POST", "/usage/reset?app=acme&api=/v1/chat", ""); code != 401 {
				t.Errorf("reset without a token: %d %v", code, b)
			}
			if code, b := adminDo(t, admin, "POST", "/usage/reset?app=acme&api=/v1/chat", "wrong"); code != 401 {
				t.Errorf("reset with a wrong token: %d %v", code, b)
			}
			if w := g.do("GET", "/v1/chat", "acme"); w.Code != 429 {
				t.Fatalf("before the reset: %d, want 429 (locked out)", w.Code)
			}
			if code, b := adminDo(t, admin, "POST", "/usage/reset?app=acme&api=/v1/chat", "tok"); code != 200 || b["existed"] != true {
				t.Fatalf("reset: %d %v", code, b)
			}
			// The counter and its lockout are gone.
			if w := g.do("GET", "/v1/chat", "acme"); w.Code != 200 {
				t.Errorf("after the reset: %d, want 200", w.Code)
			}
			if _, b := adminDo(t, admin, "GET", "/usage?app=acme", "tok"); usedOf(t, b, "/v1/chat") != 1.0 {
				t.Errorf("after the reset: %v", b)
			}
			for _, tc := range []struct {
				target string
				code   int
			}{
				{"/usage/reset?app=nobody&api=/v1/chat", 404},
				{"/usage/reset?app=acme&api=/v1/none", 400},
				{"/usage/reset?app=acme", 400},
				{"/usage/reset?app=acme&api=/v1/ip", 400}, // needs key=
			} {
				if code, b := adminDo(t, admin, "POST", tc.target, "tok"); code != tc.code {
					t.Errorf("POST %s: %d %v, want %d", tc.target, code, b, tc.code)
				}
			}
			if code, _ := adminDo(t, admin, "GET", "/usage", "tok"); code != 400 {
				t.Errorf("GET /usage without app: %d, want 400", code)
			}
		})
	}
}

// TestUsageStoreDown reads and resets usage while the Redis store cannot
// answer (its server stopped, then its breaker open): each answer is 503
// store_unavailable, never a 400 that blames the request.
func TestUsageStoreDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	_, admin := usageGW(t, red, red)
	if code, b := adminDo(t, admin, "GET", "/usage?app=acme", "tok"); code != 200 {
		t.Fatalf("GET /usage with Redis up: %d %v", code, b)
	}
	srv.Stop()
	// The first reads fail on the connection, later ones on the open
	// breaker: both are the store's failure.
	for i := range 8 {
		if code, b := adminDo(t, admin, "GET", "/usage?app=acme", "tok"); code != 503 || b["error"] != "store_unavailable" {
			t.Fatalf("GET /usage %d with Redis down: %d %v, want 503 store_unavailable", i+1, code, b)
		}
	}
	if !red.CircuitOpen() {
		t.Errorf("the breaker did not open: the test did not read through it")
	}
	if code, b := adminDo(t, admin, "POST", "/usage/reset?app=acme&api=/v1/chat", "tok"); code != 503 || b["error"] != "store_unavailable" {
		t.Errorf("POST /usage/reset with Redis down: %d %v, want 503 store_unavailable", code, b)
	}
}

// TestUsageOverLimit reads the usage of a token budget that one
// response's cost took past its limit, on both stores: 1,200 tokens of
// 1,000 are used, none remain, and a priced limit's money says the same.
// On Redis the request refused after it leaves a denial in the deny
// cache, which the read must not answer from.
func TestUsageOverLimit(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: acme
    limits:
      - {api: /v1/chat, limit: 1000, unit: 3600, cost: {header: X-Tokens, max: 5000}}
      - {api: /v1/priced, limit: 1000, unit: 3600, cost: {price: {m: {input: 1, output: 1}}, max: 5000}}
`
	up := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/priced" {
			// 1,200 tokens at a dollar per million: 1,200 micro-dollars.
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model":"m","usage":{"prompt_tokens":200,"completion_tokens":1000}}`)
			return
		}
		w.Header().Set("X-Tokens", "1200")
	}
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clock := gwtest.NewClock(t0)
			store := usageStore(t, kind, clock)
			g, admin := usageGWOf(t, rules, up, store, nil)
			g.clock = clock
			do := func(api string) int {
				r := httptest.NewRequest("POST", api, strings.NewReader(`{"model":"m"}`))
				r.Header.Set("X-App-Id", "acme")
				w := httptest.NewRecorder()
				g.h.ServeHTTP(w, r)
				return w.Code
			}
			for _, api := range []string{"/v1/chat", "/v1/priced"} {
				if code := do(api); code != 200 {
					t.Fatalf("the first request to %s: %d, want 200", api, code)
				}
				if code := do(api); code != 429 {
					t.Fatalf("a request to %s after 1200 of 1000: %d, want 429", api, code)
				}
			}
			code, body := adminDo(t, admin, "GET", "/usage?app=acme", "tok")
			if code != 200 {
				t.Fatalf("GET /usage: %d %v", code, body)
			}
			for _, l := range body["limits"].([]any) {
				line := l.(map[string]any)
				if line["used"] != 1200.0 || line["remaining"] != 0.0 {
					t.Errorf("%s, 1200 charged of 1000: used %v, remaining %v; want 1200, 0", line["api"], line["used"], line["remaining"])
				}
				if line["api"] != "/v1/priced" {
					continue
				}
				money, _ := line["money"].(map[string]any)
				if money["used"] != "0.0012" || money["remaining"] != "0.00" {
					t.Errorf("the priced limit's money: %v, want used 0.0012, remaining 0.00", money)
				}
			}
		})
	}
}

// TestUsageCountsHeld checks GET /usage of a limit whose requests are in
// flight, on both stores: a count rule holds a unit per request until
// its response, and the usage says them used, the room a new request
// finds remaining; once the responses (not counted) are in, none. (It
// read used 0, remaining 5 while requests were refused for the units
// held.)
func TestUsageCountsHeld(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: acme
    limits:
      - {api: /login, limit: 5, unit: 900, count: {status: [401]}}
`
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clock := gwtest.NewClock(t0)
			store := usageStore(t, kind, clock)
			answer := make(chan struct{})
			var once sync.Once
			respond := func() { once.Do(func() { close(answer) }) }
			up := func(http.ResponseWriter, *http.Request) { <-answer }
			g, admin := usageGWOf(t, rules, up, store, nil)
			t.Cleanup(respond) // before the upstream closes, on a failure

			g.clock = clock
			done := make(chan int, 3)
			for range 3 {
				go func() {
					r := httptest.NewRequest("GET", "/login", nil)
					r.Header.Set("X-App-Id", "acme")
					w := httptest.NewRecorder()
					g.h.ServeHTTP(w, r)
					done <- w.Code
				}()
			}
			usage := func() (used, remaining any) {
				code, body := adminDo(t, admin, "GET", "/usage?app=acme", "tok")
				if code != 200 {
					t.Fatalf("GET /usage: %d %v", code, body)
				}
				line := body["limits"].([]any)[0].(map[string]any)
				return line["used"], line["remaining"]
			}
			eventually.True(t, 30*time.Second, func() bool {
				used, remaining := usage()
				return used == 3.0 && remaining == 2.0
			}, "three requests in flight: /usage does not read used 3, remaining 2")
			respond()
			for range 3 {
				if code := <-done; code != 200 {
					t.Errorf("a request in flight: %d, want 200", code)
				}
			}
			if used, remaining := usage(); used != 0.0 || remaining != 5.0 {
				t.Errorf("after the responses (not counted): used %v, remaining %v; want 0, 5", used, remaining)
			}
		})
	}
}

// usageStore returns a store of kind, "memory" or "redis" (a server of
// its own, deciding on clock).
func usageStore(t *testing.T, kind string, clock *gwtest.Clock) limit.Store {
	t.Helper()
	if kind != "redis" {
		m, _ := limit.NewMemory(limit.MemoryConfig{})
		return m
	}
	red, err := redisstore.New(redisstoretest.WithDecisionClock(redisstore.Config{URL: redistest.Start(t).URL(), Timeout: 5 * time.Second}, clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	return red
}
