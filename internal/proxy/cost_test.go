package proxy

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// costUpstream answers with the status and the X-RateLimit-Cost of the
// request's status and cost query parameters (none for cost=none), and
// counts what it served.
type costUpstream struct{ served atomic.Int64 }

func (u *costUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.served.Add(1)
	q := r.URL.Query()
	if c := q.Get("cost"); c != "" && c != "none" {
		w.Header().Set("X-RateLimit-Cost", c)
	}
	code, _ := strconv.Atoi(q.Get("status"))
	if code == 0 {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	w.Write([]byte("{}"))
}

// costGW is a gateway in front of a costUpstream, on the memory store or
// on a Redis store deciding at the gateway's clock, with metrics and an
// access log.
type costGW struct {
	*gw
	up      *costUpstream
	metrics *observe.Metrics
	log     *gwtest.Log
}

func newCostGW(t *testing.T, rules, store string, srv *redistest.Server) *costGW {
	t.Helper()
	up := &costUpstream{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	clock := gwtest.NewClock(t0)
	m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Store: store, Version: "test"})
	logBuf := &gwtest.Log{}
	g := newGWWith(t, rules, us.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Now = clock.Now
		h.Observers = append(h.Observers, m, observe.NewAccessLog(logBuf, nil))
		if store == "redis" {
			red, err := redisstore.New(redisstoretest.WithDecisionClock(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second,
				// The deny cache runs on the real clock, not the test's.
				DenyCacheSize: -1}, clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { red.Close() })
			h.Store, h.FailMode = red, failmode.Closed
		}
	})
	g.clock = clock
	return &costGW{gw: g, up: up, metrics: m, log: logBuf}
}

// stores runs f on the memory store and on a Redis store, each with its
// own app ID so that runs on one Redis do not share counters.
func stores(t *testing.T, f func(t *testing.T, store string, srv *redistest.Server)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, "memory", nil)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, "redis", redistest.Start(t))
	})
}

// step is one request of a cost test and what it must get.
type step struct {
	at     time.Duration // since t0
	query  string
	status int // what the client must get
}

// run sends the steps in order and checks each status, naming the
// failing step.
func (g *costGW) run(t *testing.T, path string, steps []step) {
	t.Helper()
	for i, s := range steps {
		g.clock.Set(t0.Add(s.at))
		w := g.do("GET", path+"?"+s.query, "app-1")
		if w.Code != s.status {
			t.Fatalf("step %d (t0+%v, %s): status %d, want %d (body %s)", i, s.at, s.query, w.Code, s.status, w.Body)
		}
		if h := w.Header().Get("X-RateLimit-Cost"); h != "" && !strings.Contains(path, "keep") {
			t.Fatalf("step %d: the client got the cost header %q, which is not kept", i, h)
		}
	}
}

// TestCostFixed: a rule of 1,000 units admits 10 requests of cost 100
// and not the 11th, on both stores.
func TestCostFixed(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat
        limit: 1000
        unit: 1h
        cost: 100
`
	stores(t, func(t *testing.T, store string, srv *redistest.Server) {
		g := newCostGW(t, rules, store, srv)
		for i := range 10 {
			w := g.do("GET", "/v1/chat", "app-1")
			if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != strconv.Itoa(900-100*i) {
				t.Fatalf("request %d: status %d, remaining %q; want 200, %d", i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"), 900-100*i)
			}
		}
		if w := g.do("GET", "/v1/chat", "app-1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("request 11: status %d, want 429", w.Code)
		}
		if n := g.up.served.Load(); n != 10 {
			t.Errorf("the upstream served %d requests, want 10", n)
		}
		if got := metric(g.metrics, "gateway_cost_units_total", "app", "app-1", "api", "/v1/chat"); got != 1000 {
			t.Errorf("gateway_cost_units_total: got %v, want 1000", got)
		}
		if !strings.Contains(g.log.String(), `"cost":100`) {
			t.Errorf("the access log has no cost 100:\n%s", g.log)
		}
	})
}

// TestCostFromResponse: a rule whose cost the upstream reports admits a
// request while it has room for min, charges exactly what was reported
// (capped by max, min when missing), and refuses the next request once
// spent; the header reaches the client only with keep.
func TestCostFromResponse(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/complete
        limit: 1000
        unit: 1h
        cost: {header: X-RateLimit-Cost, max: 500, min: 10}
      - api: /v1/keep
        limit: 1000
        unit: 1h
        cost: {header: X-RateLimit-Cost, keep: true}
`
	stores(t, func(t *testing.T, store string, srv *redistest.Server) {
		g := newCostGW(t, rules, store, srv)
		g.run(t, "/v1/complete", []step{
			{0, "cost=400", 200},           // 400 charged
			{0, "cost=9000", 200},          // capped: 500 charged, 900 in all
			{0, "cost=none", 200},          // missing: min 10 charged, 910
			{0, "cost=abc", 200},           // invalid: min 10, 920
			{0, "cost=80", 200},            // room for 10: admitted, 80 charged, 1000
			{0, "cost=1", 429},             // no room for 10
			{2 * time.Hour, "cost=0", 200}, // drained; a cost of 0 charges nothing
			{2 * time.Hour, "cost=500", 200},
			{2 * time.Hour, "cost=490", 200},
			{2 * time.Hour, "cost=1", 200}, // 990 used: room for 10
			{2 * time.Hour, "cost=1", 429}, // 991 used
		})
		if n := g.up.served.Load(); n != 9 {
			t.Errorf("the upstream served %d requests, want 9", n)
		}
		if got := metric(g.metrics, "gateway_cost_units_total", "app", "app-1", "api", "/v1/complete"); got != 400+500+10+10+80+500+490+1 {
			t.Errorf("gateway_cost_units_total: got %v, want %d", got, 400+500+10+10+80+500+490+1)
		}
		if got := metric(g.metrics, "gateway_cost_header_missing_total", "app", "app-1", "api", "/v1/complete"); got != 2 {
			t.Errorf("gateway_cost_header_missing_total: got %v, want 2", got)
		}
		// The access log has what was charged and what was reported.
		var found bool
		for _, line := range strings.Split(g.log.String(), "\n") {
			var rec struct {
				Cost         int64 `json:"cost"`
				UpstreamCost int64 `json:"upstream_cost"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.UpstreamCost == 9000 {
				found = rec.Cost == 500
			}
		}
		if !found {
			t.Errorf("no access log line with upstream_cost 9000 and cost 500:\n%s", g.log)
		}
		w := g.do("GET", "/v1/keep?cost=7", "app-1")
		if w.Code != 200 || w.Header().Get("X-RateLimit-Cost") != "7" {
			t.Errorf("keep: status %d, header %q; want 200 and the header passed on", w.Code, w.Header().Get("X-RateLimit-Cost"))
		}
	})
}

// TestCountFailedLogins: 5 failed logins (401) in a minute lock the
// client out for lockSeconds, while successful ones never count.
func TestCountFailedLogins(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /login
        limit: 5
        unit: 1m
        lockSeconds: 900
        count: {status: [401, 403]}
`
	stores(t, func(t *testing.T, store string, srv *redistest.Server) {
		g := newCostGW(t, rules, store, srv)
		var steps []step
		for range 20 {
			steps = append(steps, step{0, "status=200", 200})
		}
		for range 4 {
			steps = append(steps, step{time.Second, "status=401", 401})
		}
		steps = append(steps,
			step{2 * time.Second, "status=200", 200},
			step{2 * time.Second, "status=500", 500}, // not counted
			step{2 * time.Second, "status=403", 403}, // the 5th failure
			step{3 * time.Second, "status=200", 429}, // denied: the lockout starts
			step{2 * time.Minute, "status=200", 429}, // the window has passed, the lockout has not
			step{3*time.Second + 900*time.Second - time.Millisecond, "status=200", 429},
			step{3*time.Second + 900*time.Second, "status=200", 200},
			step{3*time.Second + 900*time.Second, "status=401", 401},
		)
		g.run(t, "/login", steps)
		if n := g.up.served.Load(); n != int64(len(steps)-3) {
			t.Errorf("the upstream served %d requests, want %d", n, len(steps)-3)
		}
	})
}

func TestReportedCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		vals   []string
		want   int64
		wantOK bool
	}{
		{"number", []string{"42"}, 42, true},
		{"spaces", []string{" 7 "}, 7, true},
		{"zero", []string{"0"}, 0, true},
		{"twenty digits", []string{"12345678901234567890"}, math.MaxInt64, true},
		{"negative twenty digits", []string{"-12345678901234567890"}, 0, false},
		{"negative", []string{"-1"}, 0, false},
		{"exponent", []string{"1e30"}, 0, false},
		{"two values", []string{"1", "2"}, 0, false},
		{"none", nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := reportedCost(tc.vals)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("reportedCost(%q): got %d, %v; want %d, %v", tc.vals, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
