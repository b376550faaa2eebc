package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// readRules are a token budget with a reserve of 500 that a client may
// raise with X-Token-Estimate, and the smallest inspect.
const readRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        cost: {body: usage.total_tokens, reserve: 500, reserveHeader: X-Token-Estimate, max: 8000, inspect: 1024}
`

// chargedNth waits for the nth outcome of g and returns what its first
// limit was charged.
func (g *tokenGW) chargedNth(t *testing.T, n int) int64 {
	t.Helper()
	g.obs.waitFor(t, n)
	g.obs.mu.Lock()
	defer g.obs.mu.Unlock()
	return limitsOf(g.obs.out[n-1])[0].Charged
}

// gunzipped returns the gzip body b decoded.
func gunzipped(t *testing.T, b string) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader([]byte(b)))
	if err != nil {
		t.Fatalf("the client's body is not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the client's gzip body does not decode: %v", err)
	}
	return string(out)
}

// TestTokenBudgetCompressed: a client that accepts gzip gets the
// upstream's gzip body as it was sent, and the usage in it is charged, JSON
// or streamed; codings the gateway cannot read are not asked of the
// upstream.
func TestTokenBudgetCompressed(t *testing.T) {
	t.Parallel()
	first, rest := openAIStreamBody(4000)
	jsonBody := `{"id":"chatcmpl-1","choices":[{"message":{"content":"Hello!"}}],"usage":{"prompt_tokens":1,"completion_tokens":3999,"total_tokens":4000}}`
	tests := []struct {
		name, query, accept string
		// upstreamSaw is the Accept-Encoding the upstream got; gzipped,
		// whether the client got gzip.
		upstreamSaw string
		gzipped     bool
		want        string
	}{
		{"json gzip", "", "gzip", "gzip", true, jsonBody},
		{"stream gzip", "&stream=openai", "gzip", "gzip", true, first + rest},
		{"br and zstd dropped", "", "br, gzip;q=0.8, zstd", "gzip;q=0.8", true, jsonBody},
		{"only br: identity", "", "br", "identity", false, jsonBody},
		{"any: gzip", "", "*", "gzip", true, jsonBody},
		{"any and gzip", "", "gzip, *;q=0.1", "gzip", true, jsonBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newTokenGWWith(t, "memory", readRules)
			resp, body := g.get(t, "/v1/chat/completions?tokens=4000&gzip=1"+tc.query, "Accept-Encoding", tc.accept)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := resp.Header.Get("X-Seen-Accept-Encoding"); got != tc.upstreamSaw {
				t.Errorf("the upstream was asked for %q, want %q", got, tc.upstreamSaw)
			}
			if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tc.gzipped {
				t.Fatalf("client got gzip: %v, want %v", got, tc.gzipped)
			}
			if tc.gzipped {
				body = gunzipped(t, body)
			}
			if body != tc.want {
				t.Errorf("the client got %q, want %q", body, tc.want)
			}
			if got := g.chargedNth(t, 1); got != 4000 {
				t.Errorf("charged %d, want 4000", got)
			}
		})
	}
}

// TestTokenBudgetUnreadable: a usage the gateway cannot read is charged
// at least the reserve, and an absurd one the limit's max.
func TestTokenBudgetUnreadable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query string
		want        int64
	}{
		{"usage as an exponent", "?usage=1e30", 8000},
		{"usage of 20 digits", "?usage=12345678901234567890", 8000},
		{"usage too large for int64 and float64", "?usage=1e400", 8000},
		// A body longer than inspect (1024) is not read.
		{"body over inspect", "?tokens=4000&pad=2000", 500},
		{"body over inspect, usage below the reserve", "?tokens=20&pad=2000", 500},
		// Read, and reporting no usage: min.
		{"no usage", "?usage=%22none%22", 1},
		{"read", "?tokens=20&pad=100", 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newTokenGWWith(t, "memory", readRules)
			if resp, _ := g.get(t, "/v1/chat/completions"+tc.query); resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := g.chargedNth(t, 1); got != tc.want {
				t.Errorf("charged %d, want %d", got, tc.want)
			}
		})
	}
}

// TestTokenReserveHeaderRaisesOnly: X-Token-Estimate may raise the
// configured reserve of 500, never lower it: requests in flight together
// each hold at least 500 of a budget of 1,200.
func TestTokenReserveHeaderRaisesOnly(t *testing.T) {
	t.Parallel()
	rules := `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 1200
        unit: 1h
        algorithm: fixed_window
        cost: {body: usage.total_tokens, reserve: 500, reserveHeader: X-Token-Estimate}
`
	tests := []struct {
		name, estimate string
		admitted       int
	}{
		{"no estimate", "", 2},
		{"estimate 0", "0", 2},
		{"estimate below the reserve", "100", 2},
		{"estimate above the reserve", "700", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newTokenGWWith(t, "memory", rules)
			var wg sync.WaitGroup
			codes := make(chan int, 5)
			for range 5 {
				done := make(chan struct{})
				wg.Go(func() {
					defer close(done)
					var hdr []string
					if tc.estimate != "" {
						hdr = []string{"X-Token-Estimate", tc.estimate}
					}
					resp, _ := g.get(t, "/v1/chat/completions?tokens=30&hold=1", hdr...)
					codes <- resp.StatusCode
				})
				// One after the other: held upstream, or refused.
				select {
				case <-g.llm.arrived:
				case <-done:
				}
			}
			close(g.llm.gate)
			wg.Wait()
			close(codes)
			admitted := 0
			for c := range codes {
				switch c {
				case 200:
					admitted++
				case 429:
				default:
					t.Errorf("status %d", c)
				}
			}
			if admitted != tc.admitted {
				t.Errorf("admitted %d of 5 in flight together, want %d", admitted, tc.admitted)
			}
			// Each was charged its 30 tokens once it ended; the probe
			// holds its own reserve of 500.
			g.obs.waitFor(t, 5)
			if got, want := g.remaining(t, "/v1/chat/completions"), strconv.Itoa(1200-30*tc.admitted-500); got != want {
				t.Errorf("remaining %s, want %s", got, want)
			}
		})
	}
}

// TestTokenReserveEstimate: reserve: estimate holds a request's
// max_tokens and a prompt of a token per 4 bytes of its body, so that a
// request that cannot fit what is left of the budget is refused before the
// upstream sees it; the response is charged what it used.
func TestTokenReserveEstimate(t *testing.T) {
	t.Parallel()
	rules := `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 1000
        unit: 1h
        algorithm: fixed_window
        cost: {body: usage.total_tokens, reserve: estimate}
`
	g := newTokenGWWith(t, "memory", rules)
	prompt := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]` // 61 bytes
	tests := []struct {
		name, body, tokens string
		status             int
		charged            int64
	}{
		{"fits", prompt + `,"max_tokens":700}`, "600", 200, 600},
		// 400 left: 390 and 79 bytes of body, 20 tokens, do not fit.
		{"does not fit", prompt + `,"max_tokens":390}`, "10", 429, 0},
		{"fits what is left", prompt + `,"max_tokens":300}`, "300", 200, 300},
		// 100 left; without max_tokens the estimate is the budget's max.
		{"no max_tokens", prompt + `}`, "10", 429, 0},
		{"max_completion_tokens", prompt + `,"max_completion_tokens":50}`, "60", 200, 60},
		{"not JSON", `{"max_tokens":1`, "1", 429, 0},
	}
	for i, tc := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/chat/completions?tokens="+tc.tokens, strings.NewReader(tc.body))
		req.Header.Set("X-App-Id", "app-1")
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		g.obs.waitFor(t, i+1)
		g.obs.mu.Lock()
		o := g.obs.out[i]
		g.obs.mu.Unlock()
		if tc.status == 429 && o.Decision != observe.DecisionLimited {
			t.Errorf("%s: decision %s, want limited before the upstream", tc.name, o.Decision)
		}
		if got := limitsOf(o)[0].Charged; got != tc.charged {
			t.Errorf("%s: charged %d, want %d", tc.name, got, tc.charged)
		}
	}
}
