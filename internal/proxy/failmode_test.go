package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

func TestParseFailMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want failmode.Mode
		ok   bool
	}{
		{name: "open", in: "open", want: failmode.Open, ok: true},
		{name: "closed", in: "closed", want: failmode.Closed, ok: true},
		{name: "local", in: "local", want: failmode.Local, ok: true},
		{name: "unknown", in: "ajar"},
		{name: "case", in: "Open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got failmode.Mode
			ok := got.Set(tt.in) == nil
			if got != tt.want || ok != tt.ok {
				t.Errorf("Set(%q): got %v %v, want %v %v", tt.in, got, ok, tt.want, tt.ok)
			}
			if ok && got.String() != tt.in {
				t.Errorf("String(): got %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestScaleParams(t *testing.T) {
	t.Parallel()
	tb := func(n, burst int64) limit.Params {
		return limit.Params{Algorithm: "token_bucket", Limit: n, Burst: burst, Window: time.Minute}
	}
	tests := []struct {
		name  string
		p     limit.Params
		share float64
		want  limit.Params
	}{
		{name: "tenth", p: tb(100, 0), share: 0.1, want: tb(10, 0)},
		{name: "no float drift", p: tb(70, 0), share: 0.1, want: tb(7, 0)},
		{name: "rounded up", p: tb(15, 0), share: 0.1, want: tb(2, 0)},
		{name: "never below one", p: tb(3, 0), share: 0.1, want: tb(1, 0)},
		{name: "burst too", p: tb(100, 250), share: 0.5, want: tb(50, 125)},
		{name: "whole share", p: tb(100, 250), share: 1, want: tb(100, 250)},
		{name: "blocked stays blocked", p: tb(0, 0), share: 0.1, want: tb(0, 0)},
		{name: "unlimited stays unlimited", p: tb(-1, 0), share: 0.1, want: tb(-1, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.Scaled(tt.share); got != tt.want {
				t.Errorf("Scaled(%+v, %v): got %+v, want %+v", tt.p, tt.share, got, tt.want)
			}
		})
	}
}

// TestFailModes checks what each --fail-mode does with a request when the
// store fails.
func TestFailModes(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 20
        unit: 60
`
	tests := []struct {
		name         string
		mode         failmode.Mode
		wantCodes    []int
		wantDecision []observe.Decision
		wantBody     string
	}{
		{
			name: "open", mode: failmode.Open,
			wantCodes:    []int{200, 200, 200},
			wantDecision: []observe.Decision{observe.DecisionFailOpen, observe.DecisionFailOpen, observe.DecisionFailOpen},
		},
		{
			name: "closed", mode: failmode.Closed,
			wantCodes:    []int{503, 503, 503},
			wantDecision: []observe.Decision{observe.DecisionFailClosed, observe.DecisionFailClosed, observe.DecisionFailClosed},
			wantBody:     `{"error":"limiter_unavailable","message":"the rate limiter cannot decide right now; retry shortly"}`,
		},
		{
			// 20 × the default share 0.1 = 2 per minute in this gateway.
			name: "local", mode: failmode.Local,
			wantCodes:    []int{200, 200, 429},
			wantDecision: []observe.Decision{observe.DecisionAllowed, observe.DecisionAllowed, observe.DecisionLimited},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, rules, func(h *HandlerConfig, _ *UpstreamConfig) {
				h.Store, h.FailMode = failingStore{}, tt.mode
				if tt.mode == failmode.Local {
					mem, err := limit.NewMemory(limit.MemoryConfig{})
					if err != nil {
						t.Fatal(err)
					}
					h.Local = mem
				}
			})
			for i, want := range tt.wantCodes {
				rec := g.do("GET", "/v1/user/1", "app-1")
				o := g.obs.last()
				if rec.Code != want || o.Decision != tt.wantDecision[i] || !o.StoreError {
					t.Errorf("request %d: got %d %s (store error %v), want %d %s", i, rec.Code, o.Decision, o.StoreError, want, tt.wantDecision[i])
				}
				if tt.wantBody != "" && strings.TrimSpace(rec.Body.String()) != tt.wantBody {
					t.Errorf("request %d body: got %s, want %s", i, rec.Body, tt.wantBody)
				}
				if rec.Code == 503 && rec.Header().Get("Retry-After") != "1" {
					t.Errorf("request %d: Retry-After: got %q, want 1", i, rec.Header().Get("Retry-After"))
				}
				if rec.Code == 429 && rec.Header().Get("X-RateLimit-Limit") != "2" {
					t.Errorf("request %d: X-RateLimit-Limit: got %q, want the local 2", i, rec.Header().Get("X-RateLimit-Limit"))
				}
			}
			if !strings.Contains(g.logs.String(), "limiter failed") || strings.Count(g.logs.String(), "limiter failed") != 1 {
				t.Errorf("logs: got %q, want one line about the failing store", g.logs.String())
			}
		})
	}
}

func TestNewHandlerNeedsLocalStore(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	_, err := NewHandler(HandlerConfig{Rules: g.h.Rules(), Store: failingStore{}, Upstream: g.h.upstream, FailMode: failmode.Local})
	if err == nil {
		t.Errorf("NewHandler with FailLocal and no Local store: got nil, want an error")
	}
}
