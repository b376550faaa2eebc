package proxy

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

const planRules = `plans:
  - name: gold
    limits:
      - {api: /v1/chat, limit: %CHAT%, unit: 60, algorithm: fixed_window}
      - {api: /v1/search, limit: 1, unit: 60, algorithm: fixed_window}
configs:
  - appId: acme
    plan: gold
    limits:
      - {api: /v1/search, limit: 3, unit: 60, algorithm: fixed_window}
  - appId: bob
    plan: gold
`

func compilePlans(t *testing.T, chat string) *ruleset.Set {
	t.Helper()
	return compileRules(t, strings.ReplaceAll(planRules, "%CHAT%", chat))
}

// TestPlansThroughReload checks that an app on a plan gets the plan's
// limits with its own override, that each app counts on its own counter,
// and that changing the plan's limit keeps the counts, as a reload does.
func TestPlansThroughReload(t *testing.T) {
	t.Parallel()
	g := newGW(t, strings.ReplaceAll(planRules, "%CHAT%", "2"))
	steps := []struct {
		app, path string
		want      int
	}{
		{"acme", "/v1/search", 200}, // acme's own limit of 3 replaces gold's 1
		{"acme", "/v1/search", 200},
		{"acme", "/v1/search", 200},
		{"acme", "/v1/search", 429},
		{"bob", "/v1/search", 200}, // gold's limit of 1, bob's own counter
		{"bob", "/v1/search", 429},
		{"acme", "/v1/chat", 200},
		{"acme", "/v1/chat", 200},
		{"acme", "/v1/chat", 429},
		{"bob", "/v1/chat", 200},
	}
	for i, s := range steps {
		if w := g.do("GET", s.path, s.app); w.Code != s.want {
			t.Fatalf("step %d: %s %s: got %d, want %d", i, s.app, s.path, w.Code, s.want)
		}
	}
	// gold's chat limit goes from 2 to 3: acme has used 2, so one more
	// passes; bob has used 1, so two more.
	g.h.SetRules(compilePlans(t, "3"))
	after := []struct {
		app  string
		want int
	}{
		{"acme", 200}, {"acme", 429}, {"bob", 200}, {"bob", 200}, {"bob", 429},
	}
	for i, s := range after {
		if w := g.do("GET", "/v1/chat", s.app); w.Code != s.want {
			t.Fatalf("after reload step %d: %s: got %d, want %d", i, s.app, w.Code, s.want)
		}
	}
}
