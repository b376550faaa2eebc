package config_test

import (
	"maps"
	"os"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// TestFormatsAgree checks that the demo rules written in YAML
// (configs/demo-rules.yaml), JSON and XML parse to the same rules, apart
// from the file, its digest and the lines, and compile to rule sets that
// keep the same counters and decide every request alike.
func TestFormatsAgree(t *testing.T) {
	t.Parallel()
	files := []string{"../../configs/demo-rules.yaml", "testdata/demo-rules.json", "testdata/demo-rules.xml"}
	requests := []struct{ app, method, path string }{
		{"app-1", "GET", "/v1/user/42"},
		{"app-1", "GET", "/v1/user/42/orders"},
		{"app-1", "DELETE", "/v1/user/42/orders"},
		{"app-1", "PUT", "/v1/order/7"},
		{"app-1", "GET", "/v1/order/7"},
		{"app-1", "GET", "/v1/health"},
		{"app-1", "GET", "/v1/admin/x"},
		{"app-1", "GET", "/v1/beta"},
		{"app-2", "POST", "/v1/order"},
		{"app-2", "GET", "/v1/profile"},
		{"app-3", "POST", "/v1/login"},
		{"app-3", "GET", "/v1/search"},
		{"app-3", "PUT", "/v1/upload/1"},
		{"partner-1", "GET", "/anything"},
		{"", "GET", "/v1/user"},
		{"nobody", "GET", "/V1/USER"},
	}
	lines := regexp.MustCompile(`line \d+`)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

	var want *config.Rules
	var wantKeys map[string]time.Duration
	var wantExplain []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := config.Parse(f, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rs, err := ruleset.Compile(r, t0)
		if err != nil {
			t.Fatalf("%s: compiling: %v", f, err)
		}
		var explain []string
		for _, q := range requests {
			out, err := rs.Explain(q.app, q.method, q.path)
			if err != nil {
				out = "error: " + err.Error()
			}
			explain = append(explain, lines.ReplaceAllString(out, "line N"))
		}
		got := withoutPlaces(r)
		if want == nil {
			want, wantKeys, wantExplain = got, rs.LimitKeys(), explain
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got rules\n%+v\nwant (as %s)\n%+v", f, got, files[0], want)
		}
		if keys := rs.LimitKeys(); !maps.Equal(keys, wantKeys) {
			t.Errorf("%s: got counters %v, want (as %s) %v", f, keys, files[0], wantKeys)
		}
		for i, q := range requests {
			if explain[i] != wantExplain[i] {
				t.Errorf("%s: %s %s from %q: got\n%s\nwant (as %s)\n%s", f, q.method, q.path, q.app, explain[i], files[0], wantExplain[i])
			}
		}
	}
}

// withoutPlaces returns a copy of r without what differs between the same
// rules written in two files: the path, the digest and the lines.
func withoutPlaces(r *config.Rules) *config.Rules {
	c := *r
	c.Path, c.SHA256 = "", ""
	c.Apps = nil
	for _, a := range r.Apps {
		a.Line = 0
		var limits []config.Rule
		for _, l := range a.Limits {
			l.Line = 0
			limits = append(limits, l)
		}
		a.Limits = limits
		c.Apps = append(c.Apps, a)
	}
	return &c
}
