package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// metered is a gateway with metrics on its own registry.
type metered struct {
	*gw
	reg *prometheus.Registry
	m   *observe.Metrics
}

func newMetered(t *testing.T, rules string, upstreamURL string) *metered {
	t.Helper()
	reg := prometheus.NewRegistry()
	var m *observe.Metrics
	opt := func(h *HandlerConfig, u *UpstreamConfig) {
		store := h.Store.(*limit.Memory)
		m = observe.NewMetrics(observe.MetricsConfig{Registry: reg, Keys: store.Len, Version: "test"})
		h.Observers = append(h.Observers, m)
		u.Events = m
	}
	var g *gw
	if upstreamURL == "" {
		g = newGW(t, rules, opt)
	} else {
		g = newGWWith(t, rules, upstreamURL, nil, opt)
	}
	m.RulesLoaded(len(g.h.Rules().LimitKeys()), t0)
	return &metered{gw: g, reg: reg, m: m}
}

func (m *metered) requests(app, api string, d observe.Decision) float64 {
	return metric(m.m, "gateway_requests_total", "app", app, "api", api, "decision", d.String())
}

// metric returns the sum of the series of the metric name that m exposes
// (what Prometheus scrapes from m.Handler) whose labels include the
// given name, value pairs; 0 when there are none.
func metric(m *observe.Metrics, name string, labels ...string) float64 {
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	sum := 0.0
	for line := range strings.Lines(w.Body.String()) {
		line = strings.TrimSpace(line)
		series, val, ok := cutLast(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n, set, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		got := parseLabels(strings.TrimSuffix(set, "}"))
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if v, ok := got[labels[i]]; !ok || v != labels[i+1] {
				match = false
			}
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil && match {
			sum += f
		}
	}
	return sum
}

func cutLast(s, sep string) (before, after string, ok bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// parseLabels parses the labels of a series in the text exposition
// format: a="x",b="y\"z".
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(rest[i])
		}
		out[strings.TrimPrefix(k, ",")] = v.String()
		if i >= len(rest) {
			break
		}
		s = rest[i+1:]
	}
	return out
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
		d        observe.Decision
		want     float64
	}{
		{"app-2", "/v1/user", observe.DecisionAllowed, 2},
		{"app-2", "/v1/user", observe.DecisionLimited, 1},
		{"app-1", "/v1/beta", observe.DecisionAllowed, 1},
		{"app-1", "/v1/beta", observe.DecisionShadowLimited, 1},
		{"app-1", "/v1/free", observe.DecisionAllowed, 1},
		{"*", "", observe.DecisionInvalid, 1},
		{"app-1", "", observe.DecisionInvalid, 1},
		{"*", "/", observe.DecisionAllowed, 1},
	}
	for _, tt := range tests {
		if got := m.requests(tt.app, tt.api, tt.d); got != tt.want {
			t.Errorf("requests{%s,%s,%s}: got %v, want %v", tt.app, tt.api, tt.d, got, tt.want)
		}
	}
	if got := metric(m.m, "gateway_upstream_responses_total", "code", "200"); got != 6 {
		t.Errorf("upstream responses{200}: got %v, want 6", got)
	}
	if got := metric(m.m, "gateway_rules_loaded"); got != 8 {
		t.Errorf("rules loaded: got %v, want 8 (app-1: a total and 5 rules; app-2: 1; *: 1)", got)
	}
	// Every decision's series exists from the start, at 0 until used.
	if got, want := testutil.CollectAndCount(m.reg, "gateway_request_duration_seconds"), int(observe.NumDecisions); got != want {
		t.Errorf("request duration series: got %d, want %d, one per decision", got, want)
	}
	if got := m.requests("app-2", "/v1/user", observe.DecisionFailClosed); got != 0 {
		t.Errorf("requests{app-2,/v1/user,fail_closed}: got %v, want 0", got)
	}
	// app-2's second request left /v1/user (limit 2) fully used: near.
	if got := metric(m.m, "gateway_near_limit_total", "app", "app-2", "api", "/v1/user"); got != 1 {
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
	if got := metric(m.m, "gateway_upstream_errors_total", "kind", "refused"); got != 1 {
		t.Errorf("upstream errors{refused}: got %v, want 1", got)
	}
	if got := m.requests("app-1", "/v1/user", observe.DecisionAllowed); got != 1 {
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
	fo, err := failmode.New(failmode.Config{Store: failingStore{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.h.failover = fo
	if w := m.do("GET", "/v1/user", "app-2"); w.Code != 200 {
		t.Fatalf("fail open: got %d, want 200", w.Code)
	}
	if got := metric(m.m, "gateway_store_errors_total"); got != 1 {
		t.Errorf("store errors: got %v, want 1", got)
	}
	if got := m.requests("app-2", "/v1/user", observe.DecisionFailOpen); got != 1 {
		t.Errorf("requests{fail_open}: got %v, want 1", got)
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

// requestLabels returns the app and api label values of the series of
// gateway_requests_total in reg, and the number of its other series.
func requestLabels(t *testing.T, reg *prometheus.Registry) (pairs map[string]bool, other int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	pairs = map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "gateway_requests_total" {
			other += len(mf.GetMetric())
			continue
		}
		for _, m := range mf.GetMetric() {
			var app, api string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "app":
					app = l.GetValue()
				case "api":
					api = l.GetValue()
				}
			}
			pairs[app+" "+api] = true
		}
	}
	return pairs, other
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
	// A series of gateway_requests_total appears with its first count, so
	// a decision first reached in the flood (an overflow counter that
	// fills) may add one; what must not grow is the label values.
	flood(50, "warm", 10)
	before, beforeOther := requestLabels(t, m.reg)
	flood(10_000, "flood", 11)
	after, afterOther := requestLabels(t, m.reg)
	if afterOther != beforeOther {
		t.Errorf("series but gateway_requests_total: %d before the flood, %d after", beforeOther, afterOther)
	}
	for pair := range after {
		if !before[pair] {
			t.Errorf("gateway_requests_total: the flood added app and api %q", pair)
		}
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
