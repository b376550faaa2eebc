package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// pricedUpstream answers like the LLM APIs, from its request: the JSON
// body's model, stream (true for a server-sent-event stream), and the
// query's in and out (the tokens to report; else the headers X-Test-In
// and X-Test-Out) and served (the model the response names, "" for the
// one asked). /v1/messages answers as
// Anthropic's Messages API, /v1/responses as OpenAI's Responses API,
// anything else as OpenAI's Chat Completions. It counts the requests
// that reach it.
type pricedUpstream struct{ hits atomic.Int64 }

func (u *pricedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &req)
	q := r.URL.Query()
	in, out, model := cmp.Or(q.Get("in"), r.Header.Get("X-Test-In")), cmp.Or(q.Get("out"), r.Header.Get("X-Test-Out")), q.Get("served")
	if model == "" {
		model = req.Model
	}
	model = strconv.Quote(model)
	flush := func() { http.NewResponseController(w).Flush() }
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/messages":
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%s,"output_tokens":%s}}`, model, in, out)
		case "/v1/responses":
			fmt.Fprintf(w, `{"id":"resp_1","object":"response","model":%s,"output":[],"usage":{"input_tokens":%s,"output_tokens":%s,"total_tokens":0}}`, model, in, out)
		default:
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%s,"completion_tokens":%s,"total_tokens":0}}`, model, in, out)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	switch r.URL.Path {
	case "/v1/messages":
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":%s,\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":%s,\"output_tokens\":1}}}\n\n", model, in)
		io.WriteString(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		flush()
		io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
		io.WriteString(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%s}}\n\n", out)
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	case "/v1/responses":
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":%s,\"usage\":null}}\n\n", model)
		flush()
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":%s,\"usage\":{\"input_tokens\":%s,\"output_tokens\":%s}}}\n\n", model, in, out)
	default:
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%s,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}],\"usage\":null}\n\n", model)
		flush()
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%s,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", model)
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%s,\"choices\":[],\"usage\":{\"prompt_tokens\":%s,\"completion_tokens\":%s,\"total_tokens\":0}}\n\ndata: [DONE]\n\n", model, in, out)
	}
}

// pricedRules price three APIs: $0.10 a window each, counted in
// micro-dollars.
const pricedRules = `
plans:
  - name: metered
    limits:
      - api: /v1/chat/completions
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        cost:
          price:
            gpt-4o: {input: 2.50, output: 10}
            gpt-4o-mini*: {input: 0.15, output: 0.60}
      - api: /v1/responses
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        cost:
          price: {o3: {input: 2, output: 8}}
      - api: /v1/messages
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        cost:
          price:
            claude-sonnet-4-5: {input: 3, output: 15}
            "*": {input: 15, output: 75}
          reserve: estimate
configs:
  - appId: app-1
    plan: metered
`

// pricedGW is a gateway on pricedRules in front of a pricedUpstream,
// served by a real HTTP server.
type pricedGW struct {
	*gw
	up      *pricedUpstream
	srv     *httptest.Server
	metrics *observe.Metrics
}

func newPricedGW(t *testing.T, store string) *pricedGW {
	t.Helper()
	return newPricedGWWith(t, store, pricedRules)
}

// newPricedGWWith is newPricedGW on rules of the test's own.
func newPricedGWWith(t *testing.T, store, rules string) *pricedGW {
	t.Helper()
	up := &pricedUpstream{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	clock := gwtest.NewClock(t0)
	m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Store: store, Version: "test"})
	g := newGWWith(t, rules, us.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Now = clock.Now
		h.Observers = append(h.Observers, m)
		if store == "redis" {
			redis := redistest.Start(t)
			red, err := redisstore.New(redisstoretest.WithDecisionClock(redisstore.Config{URL: redis.URL(), Timeout: 5 * time.Second, DenyCacheSize: -1}, clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { red.Close() })
			h.Store, h.FailMode = red, failmode.Closed
		}
	})
	g.clock = clock
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	return &pricedGW{gw: g, up: up, srv: srv, metrics: m}
}

// post sends body to target through the real server and returns the
// response with its body read.
func (g *pricedGW) post(t *testing.T, target, body string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+target, strings.NewReader(body))
	req.Header.Set("X-App-Id", "app-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestPricedBudget: a budget in money charges each response its input
// and output tokens at its model's price, exactly, in micro-dollars,
// from JSON bodies and streams of the three APIs, on both stores; the
// served model's price wins over the asked one's.
func TestPricedBudget(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		tests := []struct {
			name, target, body string
			want               int64 // micro-dollars
			in, out            int64
		}{
			// 1000 × 2.50 + 500 × 10 = 7500 µ$.
			{"chat json", "/v1/chat/completions?in=1000&out=500", `{"model":"gpt-4o"}`, 7500, 1000, 500},
			{"chat stream", "/v1/chat/completions?in=1000&out=500", `{"model":"gpt-4o","stream":true}`, 7500, 1000, 500},
			// The served snapshot is priced by gpt-4o-mini*: 9 × 0.15 + 12 × 0.60 = 8.55, rounded up.
			{"served model wins", "/v1/chat/completions?in=9&out=12&served=gpt-4o-mini-2024-07-18", `{"model":"gpt-4o"}`, 9, 9, 12},
			// A served snapshot the table does not name: the asked model's price.
			{"asked model when served unpriced", "/v1/chat/completions?in=1000&out=500&served=gpt-4o-2024-08-06", `{"model":"gpt-4o"}`, 7500, 1000, 500},
			{"responses json", "/v1/responses?in=30&out=8", `{"model":"o3","input":"hi"}`, 124, 30, 8},
			{"responses stream", "/v1/responses?in=30&out=8", `{"model":"o3","input":"hi","stream":true}`, 124, 30, 8},
			// 25 × 3 + 15 × 15 = 300 µ$.
			{"anthropic json", "/v1/messages?in=25&out=15", `{"model":"claude-sonnet-4-5","max_tokens":100}`, 300, 25, 15},
			{"anthropic stream", "/v1/messages?in=25&out=15", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true}`, 300, 25, 15},
			// Any other model: "*", 25 × 15 + 15 × 75 = 1500.
			{"anthropic other model", "/v1/messages?in=25&out=15", `{"model":"claude-opus-4-1","max_tokens":100}`, 1500, 25, 15},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				g := newPricedGW(t, store)
				api, _, _ := strings.Cut(tc.target, "?")
				for i := range 3 {
					resp, body := g.post(t, tc.target, tc.body)
					if resp.StatusCode != 200 {
						t.Fatalf("request %d: status %d (%s)", i+1, resp.StatusCode, body)
					}
					if got := limitsOf(g.obs.last())[0].Charged; got != tc.want {
						t.Errorf("request %d: charged %d µ$, want %d", i+1, got, tc.want)
					}
				}
				// A request without a reserve (or one whose reserve is
				// given back) sees what three responses cost.
				resp, _ := g.post(t, api+"?in=0&out=0", tc.body)
				if got, want := resp.Header.Get("X-RateLimit-Remaining"), 100000-3*tc.want; !strings.HasPrefix(api, "/v1/messages") && got != strconv.FormatInt(want, 10) {
					t.Errorf("remaining: got %s, want %d", got, want)
				}
				if got := metric(g.metrics, "gateway_spend_micros_total", "app", "app-1", "plan", "metered"); got != float64(3*tc.want) {
					t.Errorf("gateway_spend_micros_total: got %v, want %d", got, 3*tc.want)
				}
				if got := metric(g.metrics, "gateway_priced_tokens_total", "app", "app-1", "kind", "input"); got != float64(3*tc.in) {
					t.Errorf("input tokens: got %v, want %d", got, 3*tc.in)
				}
				if got := metric(g.metrics, "gateway_priced_tokens_total", "app", "app-1", "kind", "output"); got != float64(3*tc.out) {
					t.Errorf("output tokens: got %v, want %d", got, 3*tc.out)
				}
				if got := metric(g.metrics, "gateway_token_units_total", "app", "app-1"); got != 0 {
					t.Errorf("gateway_token_units_total counted %v of a priced budget", got)
				}
			})
		}
	})
}

// TestPricedBudgetUnknownModel: a model the table does not price, with no
// "*", is refused with 400 before the upstream sees it, as is a request
// that names no model.
func TestPricedBudgetUnknownModel(t *testing.T) {
	t.Parallel()
	g := newPricedGW(t, "memory")
	for _, body := range []string{`{"model":"gpt-5"}`, `{"messages":[]}`, `not json`} {
		resp, got := g.post(t, "/v1/chat/completions?in=1&out=1", body)
		if resp.StatusCode != 400 || !strings.Contains(got, `"error":"unknown_model"`) {
			t.Errorf("%s: got %d %s, want 400 unknown_model", body, resp.StatusCode, got)
		}
	}
	if n := g.up.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests for unpriced models", n)
	}
}

// TestPricedEstimateRefusedEarly: reserve: estimate holds the request's
// max_tokens and prompt at its model's price; a request whose estimate
// cannot fit what is left of the budget is refused before the upstream
// sees it, and one that fits is charged its true cost.
func TestPricedEstimateRefusedEarly(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		g := newPricedGW(t, store)
		// 4000 output tokens at $15/M = 60000 µ$ reserved, plus the prompt.
		big := `{"model":"claude-sonnet-4-5","max_tokens":4000}`
		resp, body := g.post(t, "/v1/messages?in=2000&out=2000", big)
		if resp.StatusCode != 200 {
			t.Fatalf("first: status %d (%s)", resp.StatusCode, body)
		}
		// Charged its true cost: 2000 × 3 + 2000 × 15 = 36000.
		if got := limitsOf(g.obs.last())[0].Charged; got != 36000 {
			t.Errorf("first: charged %d, want 36000", got)
		}
		// 64000 left: the same estimate (60000 + 12) fits once more.
		if resp, body := g.post(t, "/v1/messages?in=2000&out=2000", big); resp.StatusCode != 200 {
			t.Fatalf("second: status %d (%s)", resp.StatusCode, body)
		}
		hits := g.up.hits.Load()
		// 28000 left: an estimate of 60012 cannot fit.
		resp, body = g.post(t, "/v1/messages?in=1&out=1", big)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("third: status %d (%s), want 429", resp.StatusCode, body)
		}
		if n := g.up.hits.Load(); n != hits {
			t.Errorf("the upstream saw the refused request (%d hits, want %d)", n, hits)
		}
		// A small request still fits: 100 × 15 + the prompt.
		if resp, body := g.post(t, "/v1/messages?in=10&out=10", `{"model":"claude-sonnet-4-5","max_tokens":100}`); resp.StatusCode != 200 {
			t.Errorf("small: status %d (%s)", resp.StatusCode, body)
		}
	})
}
