package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"go.yaml.in/yaml/v3"
)

// exportedMetrics returns the names of every metric NewMetrics registers,
// including histogram series suffixes.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	observe.NewMetrics(observe.MetricsConfig{Registry: reg})
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{"up": true}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	if !names["gateway_requests_total"] {
		t.Fatalf("no gateway metrics described: %v", names)
	}
	return names
}

var metricName = regexp.MustCompile(`\b(gateway_[a-z_]+)`)

func checkExpr(t *testing.T, where, expr string, known map[string]bool) int {
	t.Helper()
	found := metricName.FindAllString(expr, -1)
	for _, n := range found {
		if !known[n] {
			t.Errorf("%s: query names %s, which the gateway does not export: %s", where, n, expr)
		}
	}
	return len(found)
}

func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exportedMetrics(t)
	files, _ := filepath.Glob("grafana/*.json")
	if len(files) == 0 {
		t.Fatal("no dashboard under deploy/grafana")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Type    string `json:"type"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		queries := 0
		for _, p := range d.Panels {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, tg := range p.Targets {
				if checkExpr(t, f+": "+p.Title, tg.Expr, known) == 0 {
					t.Errorf("%s: panel %q query names no gateway metric: %s", f, p.Title, tg.Expr)
				}
				queries++
			}
		}
		if queries < 10 {
			t.Errorf("%s: %d queries, want a dashboard worth the name", f, queries)
		}
	}
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exportedMetrics(t)
	data, err := os.ReadFile("prometheus/gateway.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			checkExpr(t, r.Alert, r.Expr, known)
		}
	}
	for _, want := range []string{"GatewayHighLimitedRatio", "GatewayRuleReloadFailed", "GatewayStoreErrors", "GatewayStoreCircuitOpen", "GatewayUpstreamErrors"} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	if strings.Contains(string(data), "\t") {
		t.Error("tabs in YAML")
	}
}
