package proxy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// redisGW is a gateway on the redis store, with metrics.
type redisGW struct {
	*gw
	red     *redisstore.Store
	metrics *observe.Metrics
}

// newRedisGW returns a gateway whose store is a Redis store on srv with
// fail mode mode (and, for FailLocal, a memory store for the local
// decisions) and the given Redis timeout: a test's generous one, unless
// the test is about timeouts (the default 25ms is a production value).
func newRedisGW(t *testing.T, rules string, srv *redistest.Server, mode failmode.Mode, timeout time.Duration, opts ...func(*redisstore.Config)) *redisGW {
	t.Helper()
	var m *observe.Metrics
	rcfg := redisstore.Config{URL: srv.URL(), Timeout: timeout, OnCircuitChange: func(open bool) { m.SetCircuitOpen(open) }}
	for _, o := range opts {
		o(&rcfg)
	}
	red, err := redisstore.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	m = observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Store: "redis", Version: "test"})
	g := newGW(t, rules, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Store, h.FailMode = red, mode
		h.Observers = append(h.Observers, m)
		if mode == failmode.Local {
			mem, err := limit.NewMemory(limit.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			h.Local = mem
		}
	})
	return &redisGW{gw: g, red: red, metrics: m}
}

// from sends one request through the handler from the client at ip.
func (g *gw) from(ip, target, app string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = ip + ":4321"
	if app != "" {
		r.Header.Set("X-App-Id", app)
	}
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w
}

const fleetRules = `
configs:
  - appId: app-1
    limit: 60
    unit: 1h
    algorithm: sliding_log
    limits:
      - api: /v1/a
        limit: 25
        unit: 1h
      - api: /v1/b
        limit: 1000
        unit: 1h
        algorithm: token_bucket
  - appId: app-2
    limits:
      - api: /v1/fixed
        limit: 30
        unit: 24h
        algorithm: fixed_window
      - api: /v1/leaky
        limit: 30
        unit: 1h
        algorithm: leaky_bucket
  - appId: "*"
    limits:
      - api: /
        limit: 10
        unit: 1h
`

// TestRedisFleet runs three gateways on one Redis, hammered concurrently:
// together they admit exactly each limit — an app total and its rules
// counted atomically, unknown callers per IP — and ask Redis at most once
// per request.
func TestRedisFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var gws []*redisGW
	for range 3 {
		// Fail closed with a generous timeout: this test is about exact
		// counts, and a call that times out on a loaded CI machine must
		// show up as a 503 failure, never as a silent fail-open admission.
		// One fixed instant for every decision: the counts are exact
		// whatever the machine's speed, with no window boundary between
		// two requests.
		gws = append(gws, newRedisGW(t, fleetRules, srv, failmode.Closed, 5*time.Second,
			func(c *redisstore.Config) { *c = redisstoretest.WithDecisionClock(*c, func() time.Time { return t0 }) }))
	}
	type target struct{ path, app, ip string }
	targets := []target{
		{"/v1/a/1", "app-1", ""}, {"/v1/b/2", "app-1", ""}, {"/v1/fixed", "app-2", ""}, {"/v1/leaky", "app-2", ""},
		{"/x", "", "203.0.113.1"}, {"/y", "", "203.0.113.2"}, {"/z", "nobody", "203.0.113.3"},
	}
	var (
		mu       sync.Mutex
		admitted = map[target]int{}
		sent     atomic.Int64
	)
	var wg sync.WaitGroup
	for w := range 9 {
		wg.Go(func() {
			g := gws[w%len(gws)]
			for i := range 60 {
				tg := targets[(w+i)%len(targets)]
				ip := tg.ip
				if ip == "" {
					ip = "192.0.2.1"
				}
				rec := g.from(ip, tg.path, tg.app)
				sent.Add(1)
				switch rec.Code {
				case 200:
					mu.Lock()
					admitted[tg]++
					mu.Unlock()
				case 429:
				default:
					t.Errorf("%s: got %d %s", tg.path, rec.Code, rec.Body)
				}
			}
		})
	}
	wg.Wait()
	a, b := admitted[targets[0]], admitted[targets[1]]
	if a > 25 || a+b != 60 {
		t.Errorf("app-1: admitted /v1/a %d and /v1/b %d, want at most 25 and exactly 60 in all", a, b)
	}
	if got := admitted[targets[2]]; got != 30 {
		t.Errorf("app-2 /v1/fixed: admitted %d, want exactly 30", got)
	}
	if got := admitted[targets[3]]; got != 30 {
		t.Errorf("app-2 /v1/leaky: admitted %d, want exactly 30", got)
	}
	for _, tg := range targets[4:] {
		if got := admitted[tg]; got != 10 {
			t.Errorf("unknown caller %s: admitted %d, want exactly 10", tg.ip, got)
		}
	}
	calls := redistest.ScriptCalls(t, srv.Client())
	if calls > sent.Load() {
		t.Errorf("Redis script calls: got %d for %d requests, want at most one per request", calls, sent.Load())
	}
	t.Logf("%d requests, %d Redis script calls (the deny cache answered the rest)", sent.Load(), calls)

	// Unknown callers' keys are tagged with their caller bucket, chosen by
	// their IP, so that they spread over a cluster's slots; within the key
	// budget (the database holds far fewer keys than --redis-max-keys) each
	// has a counter of its own, and none counted on an overflow counter.
	keys, err := srv.Client().Keys(context.Background(), "gw:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	tag := limit.CallerTag("203.0.113.1")
	for _, k := range keys {
		if strings.HasSuffix(k, "|overflow") {
			t.Errorf("overflow counter %q within the key budget", k)
		}
	}
	for _, want := range []string{"gw:{app-1}:", "gw:{app-1}:/v1/a", "gw:{" + tag + "}|*|/|203.0.113.1"} {
		if !slices.Contains(keys, want) {
			t.Errorf("Redis keys %v lack %q", keys, want)
		}
	}
}

const outageRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1
        limit: 100000
        unit: 1h
      - api: /v1/small
        limit: 100
        unit: 1h
`

// TestRedisOutage stops Redis (killed, or hung with SIGSTOP) under load in
// each fail mode: open admits everything (no 5xx), closed answers 503,
// local limits in memory with the local share; and once Redis is back,
// the gateway uses it again. Latencies during the outage and the time to
// recover are logged, not asserted: they are figures for a note, and a
// shared CI machine makes any bound on them flaky.
func TestRedisOutage(t *testing.T) {
	// Not parallel with other tests: it logs latencies.
	for _, mode := range []failmode.Mode{failmode.Open, failmode.Closed, failmode.Local} {
		for _, how := range []string{"killed", "hung"} {
			t.Run(mode.String()+"/"+how, func(t *testing.T) {
				testOutage(t, mode, how)
			})
		}
	}
}

func testOutage(t *testing.T, mode failmode.Mode, how string) {
	srv := redistest.Start(t)
	// A generous timeout: a loaded machine must not make Redis look down
	// before the test stops it (250ms was seen to fail with both cores
	// busy). The store is ready first: its first call must not also dial
	// and load the script within the timeout.
	g := newRedisGW(t, outageRules, srv, mode, time.Second)
	redistest.Ready(t, g.red)
	for range 20 {
		if rec := g.do("GET", "/v1/x", "app-1"); rec.Code != 200 {
			t.Fatalf("with Redis up: got %d %s", rec.Code, rec.Body)
		}
	}
	if how == "killed" {
		srv.Stop()
	} else {
		srv.Pause()
		t.Cleanup(srv.Resume)
	}

	// Load until the breaker opens, then measure a fixed number of
	// requests: what they are answered is the test, not how many a
	// loaded machine sends in some time.
	const measure = 60
	var (
		mu        sync.Mutex
		latencies []time.Duration
		codes     = map[int]int{} // while measuring
		small     = map[int]int{} // /v1/small since the outage began
		bodies    []string
		measuring bool
	)
	open := func() bool { return metric(g.metrics, "gateway_store_circuit_open") == 1 }
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				mu.Lock()
				smalls := 0
				for _, n := range small {
					smalls += n
				}
				// Enough requests measured, and enough to /v1/small to
				// pass its local share.
				if len(latencies) >= measure && smalls >= 20 || time.Now().After(deadline) {
					mu.Unlock()
					return
				}
				started := measuring
				mu.Unlock()
				target := "/v1/x"
				if w == 1 && i%2 == 0 {
					target = "/v1/small"
				}
				start := time.Now()
				rec := g.do("GET", target, "app-1")
				took := time.Since(start)
				mu.Lock()
				if target == "/v1/small" {
					small[rec.Code]++
				}
				if started && len(latencies) < measure {
					latencies = append(latencies, took)
					codes[rec.Code]++
					if rec.Code == 503 && len(bodies) < 1 {
						bodies = append(bodies, rec.Body.String())
					}
				} else if open() {
					measuring = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(latencies) < measure {
		t.Fatalf("the breaker did not open within a minute of the outage (%d requests measured)", len(latencies))
	}
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100]
	t.Logf("%d requests during the outage: p50 %v, p99 %v, max %v; codes %v", len(latencies),
		latencies[len(latencies)/2], p99, latencies[len(latencies)-1], codes)
	switch mode {
	case failmode.Open:
		if codes[200] != len(latencies) {
			t.Errorf("fail open: got codes %v, want only 200", codes)
		}
	case failmode.Closed:
		// Only 503s, but for what the leases held when Redis went away:
		// those were counted (docs/fleet.md, "Leases").
		if leased := g.red.Stats().LeaseGranted; codes[503]+codes[200] != len(latencies) || int64(codes[200]) > leased {
			t.Errorf("fail closed: got codes %v, want only 503 and at most the %d tokens leased before the outage", codes, leased)
		}
		if len(bodies) == 0 || !strings.Contains(bodies[0], `"error":"limiter_unavailable"`) {
			t.Errorf("fail closed body: got %v", bodies)
		}
	case failmode.Local:
		// /v1/small's 100 scaled by the default local share 0.1.
		if small[200] != 10 || small[429] == 0 || codes[200]+codes[429] != len(latencies) {
			t.Errorf("fail local: /v1/small codes %v (want 10 admitted, then 429s), all codes %v", small, codes)
		}
	}
	// Every request was a store error but those admitted from leases.
	if got, want := metric(g.metrics, "gateway_store_errors_total"), len(latencies)-int(g.red.Stats().LeaseSpent); got < float64(want) {
		t.Errorf("store errors: got %v, want at least %d", got, want)
	}

	// Redis comes back: the gateway uses it within two seconds.
	if how == "killed" {
		srv.Restart()
	} else {
		srv.Resume()
	}
	back := time.Now()
	for {
		g.do("GET", "/v1/x", "app-1")
		if o := g.obs.last(); !o.StoreError {
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("the gateway did not use Redis within 10s of its return")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("Redis used again %v after it came back", time.Since(back))
	if open() {
		t.Errorf("gateway_store_circuit_open: still 1 after recovery")
	}
}

// TestRedisHandlerKeepsMemorySemantics checks, through the handler, that
// the redis store behaves as the memory store on a single gateway:
// headers, 429 bodies with a true Retry-After, a denied request consuming
// nothing. It fails closed with a test's generous timeout: a call slowed by
// a loaded machine must fail the test visibly, never admit by fail-open.
func TestRedisHandlerKeepsMemorySemantics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	g := newRedisGW(t, basicRules, srv, failmode.Closed, 5*time.Second)
	for i := range 3 {
		rec := g.do("GET", "/v1/user/42", "app-1")
		if rec.Code != 200 {
			t.Fatalf("request %d: got %d %s", i, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get("X-RateLimit-Remaining"), fmt.Sprint(2-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining: got %q, want %q", i, got, want)
		}
	}
	rec := g.do("GET", "/v1/user/42", "app-1")
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"error":"rate_limited"`) {
		t.Fatalf("fourth: got %d %v %s, want 429 with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	// The app total (5) lost nothing to the denial: 2 are left for another rule.
	if rec := g.do("GET", "/v1/user/42/orders", "app-1"); rec.Code != 200 {
		t.Errorf("another rule: got %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Ratelimit"); !strings.Contains(got, `"app-1";r=2`) {
		t.Errorf("RateLimit of the denied request: got %q, want the total's r=2", got)
	}
}
