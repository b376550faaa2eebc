package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// metered is a gateway with metrics on its own registry.
type metered struct {
	*gw
	reg *prometheus.Registry
	m   *Metrics
}

func newMetered(t *testing.T, rules string, upstreamURL string) *metered {
	t.Helper()
	reg := prometheus.NewRegistry()
	var m *Metrics
	opt := func(h *HandlerConfig, u *UpstreamConfig) {
		store := h.Store.(*limit.Memory)
		m = NewMetrics(MetricsConfig{Registry: reg, Keys: store.Len, Version: "test"})
		h.Observers = append(h.Observers, m)
		u.Events = m
	}
	var g *gw
	if upstreamURL == "" {
		g = newGW(t, rules, opt)
	} else {
		g = newGWWith(t, rules, upstreamURL, nil, opt)
	}
	m.RulesLoaded(true, g.h.Rules(), t0)
	return &metered{gw: g, reg: reg, m: m}
}

func (m *metered) requests(app, api string, d Decision) float64 {
	return testutil.ToFloat64(m.m.requests.WithLabelValues(app, api, d.String()))
}

func TestMetricsCountDecisions(t *testing.T) {
	t.Parallel()
	m := newMetered(t, basicRules, "")
	for i := 0; i < 3; i++ {
		m.do("GET", "/v1/user", "app-2") // 2 allowed, 1 limited
	}
	m.do("GET", "/v1/beta", "app-1")  // shadow rule, allowed
	m.do("GET", "/v1/beta", "app-1")  // shadow_limited
	m.do("GET", "/v1/free", "app-1")  // unlimited rule: allowed
	m.do("GET", "/v1/user", "bad id") // invalid
	m.do("GET", "/v1/a%2Fb", "app-1") // invalid, but the app is known
	m.do("GET", "/x", "")             // unknown caller, "*" rule "/"

	tests := []struct {
		app, api string
		d        Decision
		want     float64
	}{
		{"app-2", "/v1/user", DecisionAllowed, 2},
		{"app-2", "/v1/user", DecisionLimited, 1},
		{"app-1", "/v1/beta", DecisionAllowed, 1},
		{"app-1", "/v1/beta", DecisionShadowLimited, 1},
		{"app-1", "/v1/free", DecisionAllowed, 1},
		{"*", "", DecisionInvalid, 1},
		{"app-1", "", DecisionInvalid, 1},
		{"*", "/", DecisionAllowed, 1},
	}
	for _, tt := range tests {
		if got := m.requests(tt.app, tt.api, tt.d); got != tt.want {
			t.Errorf("requests{%s,%s,%s}: got %v, want %v", tt.app, tt.api, tt.d, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(m.m.upstreamResponses.WithLabelValues("200")); got != 6 {
		t.Errorf("upstream responses{200}: got %v, want 6", got)
	}
	if got := testutil.ToFloat64(m.m.rulesLoaded); got != 8 {
		t.Errorf("rules loaded: got %v, want 8 (app-1: a total and 5 rules; app-2: 1; *: 1)", got)
	}
	// Every decision's series exists from the start, at 0 until used.
	if got, want := testutil.CollectAndCount(m.reg, "gateway_request_duration_seconds"), int(numDecisions); got != want {
		t.Errorf("request duration series: got %d, want %d, one per decision", got, want)
	}
	if got := m.requests("app-2", "/v1/user", DecisionFailClosed); got != 0 {
		t.Errorf("requests{app-2,/v1/user,fail_closed}: got %v, want 0", got)
	}
	// app-2's second request left /v1/user (limit 2) fully used: near.
	if got := testutil.ToFloat64(m.m.nearLimit.WithLabelValues("app-2", "/v1/user")); got != 1 {
		t.Errorf("near limit{app-2,/v1/user}: got %v, want 1", got)
	}
	want := fmt.Sprintf(`
# HELP gateway_build_info Always 1; the labels say which build is running.
# TYPE gateway_build_info gauge
gateway_build_info{goversion=%q,version="test"} 1
# HELP gateway_limiter_keys Counters the store tracks.
# TYPE gateway_limiter_keys gauge
gateway_limiter_keys{store="memory"} 4
`, runtime.Version())
	if err := testutil.CollectAndCompare(m.reg, strings.NewReader(want), "gateway_build_info", "gateway_limiter_keys"); err != nil {
		t.Error(err)
	}
}

func TestMetricsUpstreamErrors(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	m := newMetered(t, basicRules, dead.URL)
	m.do("GET", "/v1/user", "app-1")
	if got := testutil.ToFloat64(m.m.upstreamErrors.WithLabelValues("refused")); got != 1 {
		t.Errorf("upstream errors{refused}: got %v, want 1", got)
	}
	if got := m.requests("app-1", "/v1/user", DecisionAllowed); got != 1 {
		t.Errorf("the request is still counted: got %v", got)
	}
}

// failingStore fails every decision, to drive the fail-open path.
type failingStore struct{}

func (failingStore) Allow(_ context.Context, _ time.Time, _ []limit.Request, _ []limit.Result) (bool, error) {
	return false, fmt.Errorf("store down")
}

func TestMetricsStoreErrorsFailOpen(t *testing.T) {
	t.Parallel()
	m := newMetered(t, basicRules, "")
	m.h.store = failingStore{}
	if w := m.do("GET", "/v1/user", "app-2"); w.Code != 200 {
		t.Fatalf("fail open: got %d, want 200", w.Code)
	}
	if got := testutil.ToFloat64(m.m.storeErrors); got != 1 {
		t.Errorf("store errors: got %v, want 1", got)
	}
	if got := m.requests("app-2", "/v1/user", DecisionFailOpen); got != 1 {
		t.Errorf("requests{fail_open}: got %v, want 1", got)
	}
}

func TestMetricsReloads(t *testing.T) {
	t.Parallel()
	m := newMetered(t, basicRules, "")
	// A failed load, then a good one a minute later, as the server's
	// reloader reports them.
	m.m.RulesLoaded(false, nil, time.Time{})
	parsed, err := config.Parse("rules.yaml", []byte("configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	m.m.RulesLoaded(true, rs, rs.LoadedAt)
	want := `
# HELP gateway_rules_reloads_total Rule loads (the initial one included) by result: success, failure, or unchanged (the rules read were those in force).
# TYPE gateway_rules_reloads_total counter
gateway_rules_reloads_total{result="failure"} 1
gateway_rules_reloads_total{result="success"} 2
gateway_rules_reloads_total{result="unchanged"} 0
# HELP gateway_rules_loaded Limits in force: API rules plus app totals.
# TYPE gateway_rules_loaded gauge
gateway_rules_loaded 1
`
	if err := testutil.CollectAndCompare(m.reg, strings.NewReader(want), "gateway_rules_reloads_total", "gateway_rules_loaded"); err != nil {
		t.Error(err)
	}
	if got, want := testutil.ToFloat64(m.m.lastReload), float64(t0.Add(time.Minute).Unix()); got != want {
		t.Errorf("last reload timestamp: got %v, want %v", got, want)
	}
}

func TestMetricsReloadSeriesExistFromStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	NewMetrics(MetricsConfig{Registry: reg})
	if got := testutil.CollectAndCount(reg, "gateway_rules_reloads_total"); got != 3 {
		t.Errorf("reload series before any load: got %d, want 3", got)
	}
}

func TestMetricsLint(t *testing.T) {
	t.Parallel()
	m := newMetered(t, basicRules, "")
	m.do("GET", "/v1/user", "app-2")
	problems, err := testutil.CollectAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsLabelsStayBounded(t *testing.T) {
	t.Parallel()
	m := newMetered(t, basicRules, "")
	flood := func(n int, tag string, net int) {
		for i := 0; i < n; i++ {
			app := fmt.Sprintf("rand-%s-%d", tag, i) // valid but unconfigured: unknown callers
			r := httptest.NewRequest("GET", fmt.Sprintf("/p/%s/%d?q=%d", tag, i, i), nil)
			r.Header.Set("X-App-Id", app)
			r.RemoteAddr = fmt.Sprintf("%d.%d.%d.%d:1", net, i>>16&255, i>>8&255, i&255)
			m.h.ServeHTTP(httptest.NewRecorder(), r)
			bad := httptest.NewRequest("GET", "/", nil)
			bad.Header.Set("X-App-Id", app+"!") // invalid IDs are labelled "*"
			m.h.ServeHTTP(httptest.NewRecorder(), bad)
		}
	}
	flood(50, "warm", 10) // every decision the flood can reach has its series now
	before := testutil.CollectAndCount(m.reg)
	flood(10_000, "flood", 11)
	if after := testutil.CollectAndCount(m.reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	// Nothing of a caller's own shows up in the exposition.
	var buf bytes.Buffer
	w := httptest.NewRecorder()
	m.m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	buf.Write(w.Body.Bytes())
	if strings.Contains(buf.String(), "rand-flood") || strings.Contains(buf.String(), "/p/flood") {
		t.Error("a caller's app ID or path became a label value")
	}
}

func TestMetricsCountRoutesByClass(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(MetricsConfig{Registry: reg})
	for _, o := range []Outcome{
		{Route: "users", Upstream: "users", Status: 200},
		{Route: "users", Upstream: "users", Status: 204},
		{Route: "users", Upstream: "users", Status: 503},
		{Route: "billing", Upstream: "billing", Status: 200},
		{Route: "users", Upstream: "users-v2", Status: 200}, // after a reload
		{Route: "", Status: 200},                            // no route: not counted here
		{Route: "odd", Upstream: "users", Status: 999},
	} {
		m.ObserveRequest(nil, &o)
	}
	want := `
# HELP gateway_route_requests_total Requests that took a route of the rule file, by route, upstream and response status class (1xx..5xx).
# TYPE gateway_route_requests_total counter
gateway_route_requests_total{class="0xx",route="odd",upstream="users"} 1
gateway_route_requests_total{class="2xx",route="billing",upstream="billing"} 1
gateway_route_requests_total{class="2xx",route="users",upstream="users"} 2
gateway_route_requests_total{class="2xx",route="users",upstream="users-v2"} 1
gateway_route_requests_total{class="5xx",route="users",upstream="users"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "gateway_route_requests_total"); err != nil {
		t.Error(err)
	}
}
