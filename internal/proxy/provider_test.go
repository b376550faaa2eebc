package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestProviderRefusals: errorFormat on a route, a plan or a rule shapes
// the body of a refusal as OpenAI's or Anthropic's API would, the rule's
// setting first; retryAfterMax caps Retry-After but not the reset the
// rate-limit headers report.
func TestProviderRefusals(t *testing.T) {
	t.Parallel()
	up := newNamed(t, "llm")
	rules := fmt.Sprintf(`
upstreams:
  - name: llm
    targets: [%s]
routes:
  - path: /openai
    upstream: llm
    errorFormat: openai
    retryAfterMax: 30s
  - path: /other
    upstream: llm
plans:
  - name: anth
    errorFormat: anthropic
    limits:
      - {api: /other/messages, limit: 1, unit: 1h}
configs:
  - appId: app-1
    plan: anth
    limits:
      - {api: /openai/chat, limit: 1, unit: 1h}
      - {api: /openai/tokens, limit: 1, unit: 1h, cost: {body: usage.total_tokens}}
      - {api: /openai/own, limit: 1, unit: 1h, errorFormat: default}
      - {api: /openai/blocked, limit: 0}
      - {api: /other/plain, limit: 1, unit: 1h}
      - {api: /other/capped, limit: 1, unit: 1h, retryAfterMax: 10s, errorFormat: openai}
`, up.URL)
	g := newRouted(t, rules, "")
	send := func(path string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.srv.URL+path, nil)
		req.Header.Set("X-App-Id", "app-1")
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if resp.StatusCode != 200 {
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatalf("%s: the refusal's body %q is not JSON: %v", path, b, err)
			}
		}
		return resp, body
	}
	// get returns the string at a path of fields of v, "<absent>" if
	// there is none, "<null>" for null.
	get := func(v any, fields ...string) string {
		for _, f := range fields {
			m, ok := v.(map[string]any)
			if !ok {
				return "<absent>"
			}
			if v, ok = m[f]; !ok {
				return "<absent>"
			}
		}
		if v == nil {
			return "<null>"
		}
		s, _ := v.(string)
		return s
	}
	tests := []struct {
		name, path string
		// want are field paths ("error.code") and their values in the
		// refusal's body.
		want map[string]string
		// retryAfter is the Retry-After wanted, "" for any above 30.
		retryAfter string
	}{
		{name: "route openai", path: "/openai/chat", retryAfter: "30",
			want: map[string]string{"error.code": "rate_limit_exceeded", "error.type": "requests", "error.param": "<null>"}},
		{name: "route openai, a token budget", path: "/openai/tokens", retryAfter: "30",
			want: map[string]string{"error.code": "rate_limit_exceeded", "error.type": "tokens"}},
		{name: "rule default over route openai", path: "/openai/own", retryAfter: "30",
			want: map[string]string{"error": "rate_limited", "error.code": "<absent>"}},
		{name: "plan anthropic", path: "/other/messages",
			want: map[string]string{"type": "error", "error.type": "rate_limit_error"}},
		{name: "no format", path: "/other/plain",
			want: map[string]string{"error": "rate_limited"}},
		{name: "rule openai and cap", path: "/other/capped", retryAfter: "10",
			want: map[string]string{"error.code": "rate_limit_exceeded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if resp, _ := send(tc.path); resp.StatusCode != 200 {
				t.Fatalf("first request: status %d", resp.StatusCode)
			}
			resp, body := send(tc.path)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("second request: status %d, want 429", resp.StatusCode)
			}
			for path, want := range tc.want {
				got := get(body, strings.Split(path, ".")...)
				if got != want {
					t.Errorf("%s: got %q, want %q (body %v)", path, got, want, body)
				}
			}
			if _, shaped := tc.want["error.type"]; shaped && get(body, "error", "message") == "" {
				t.Errorf("no error.message in %v", body)
			}
			ra := resp.Header.Get("Retry-After")
			if tc.retryAfter != "" && ra != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", ra, tc.retryAfter)
			}
			if n, _ := strconv.Atoi(ra); tc.retryAfter == "" && n <= 30 {
				t.Errorf("Retry-After %q, want the true wait of about an hour", ra)
			}
			// The true reset stays in the rate-limit headers.
			if n, _ := strconv.Atoi(resp.Header.Get("X-Ratelimit-Reset")); n <= 30 {
				t.Errorf("X-RateLimit-Reset %q, want the true reset of about an hour", resp.Header.Get("X-Ratelimit-Reset"))
			}
		})
	}
	t.Run("blocked", func(t *testing.T) {
		resp, body := send("/openai/blocked")
		if resp.StatusCode != http.StatusTooManyRequests || get(body, "error", "code") != "insufficient_quota" || resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("status %d, x-should-retry %q, body %v; want 429, false and code insufficient_quota", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
		}
	})
}
