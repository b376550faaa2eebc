package observe

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsReloads(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(MetricsConfig{Registry: reg})
	// The initial load of 8 limits, a failed load, then a good one of
	// one limit a minute later, as the server's reloader reports them.
	m.RulesLoaded(8, t0)
	m.RulesFailed()
	m.RulesLoaded(1, t0.Add(time.Minute))
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
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "gateway_rules_reloads_total", "gateway_rules_loaded"); err != nil {
		t.Error(err)
	}
	if got, want := testutil.ToFloat64(m.lastReload), float64(t0.Add(time.Minute).Unix()); got != want {
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
		m.ObserveRequest(&o)
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

// TestMetricsSeriesOnFirstCount checks that a rule's request series
// appear when a request is first counted with that decision: 1,000 apps of
// two rules, each admitted once, add 2,000 series, not one per decision
// and rule, and the near-limit series only where a limit was nearly used.
func TestMetricsSeriesOnFirstCount(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(MetricsConfig{Registry: reg})
	before := testutil.CollectAndCount(reg)
	const apps = 1000
	for i := range apps {
		for _, api := range []string{"/v1/a", "/v1/b"} {
			o := Outcome{App: fmt.Sprintf("app-%d", i), API: api, Decision: DecisionAllowed}
			o.AddLimit(LimitOutcome{App: o.App, API: api, Limit: 100, Remaining: 99, Allowed: true})
			m.ObserveRequest(&o)
		}
	}
	if got, want := testutil.CollectAndCount(reg)-before, 2*apps; got != want {
		t.Errorf("series added by 2,000 first requests: got %d, want %d", got, want)
	}
	if got := testutil.CollectAndCount(reg, "gateway_near_limit_total"); got != 0 {
		t.Errorf("near-limit series with no limit near: got %d, want 0", got)
	}

	// Each new decision of a rule adds its series, counted once.
	for _, o := range []Outcome{
		{App: "app-1", API: "/v1/a", Decision: DecisionLimited},
		{App: "app-1", API: "/v1/a", Decision: DecisionLimited},
		{App: "*", API: "", Decision: DecisionUnmatched},
	} {
		m.ObserveRequest(&o)
	}
	got := testutil.CollectAndCount(reg, "gateway_requests_total")
	if got != 2*apps+2 {
		t.Errorf("gateway_requests_total series: got %d, want %d", got, 2*apps+2)
	}
	for _, tt := range []struct {
		decision Decision
		app, api string
		want     float64
	}{
		{DecisionAllowed, "app-1", "/v1/a", 1},
		{DecisionLimited, "app-1", "/v1/a", 2},
		{DecisionUnmatched, "*", "", 1},
		{DecisionAllowed, "app-999", "/v1/b", 1},
	} {
		if v := testutil.ToFloat64(m.requests.WithLabelValues(tt.app, tt.api, tt.decision.String())); v != tt.want {
			t.Errorf("requests{%s,%s,%s}: got %v, want %v", tt.app, tt.api, tt.decision, v, tt.want)
		}
	}

	// A limit left 80% used counts its near-limit series, once created.
	o := Outcome{App: "app-2", API: "/v1/a", Decision: DecisionAllowed}
	o.AddLimit(LimitOutcome{App: "app-2", API: "/v1/a", Limit: 10, Remaining: 1, Allowed: true})
	m.ObserveRequest(&o)
	if got := testutil.CollectAndCount(reg, "gateway_near_limit_total"); got != 1 {
		t.Errorf("near-limit series after one near request: got %d, want 1", got)
	}
}
