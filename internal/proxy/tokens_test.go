package proxy

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
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

// llmUpstream answers like an LLM API. The query says how:
//
//	tokens=N   the usage to report (total_tokens; Anthropic: 25 input, the rest output)
//	stream=openai|anthropic   a server-sent-event stream, else a JSON body
//	hold=1     tell arrived, then wait for gate before answering
//	first=1    send the first event, then wait for gate before the rest
//	abort=1    (anthropic) break the connection after the first delta
//	usage=V    (json) report V, as written, as total_tokens
//	pad=N      (json) N bytes of text before the usage
//	gzip=1     gzip the body when the request accepts gzip
//
// Every response says in X-Seen-Accept-Encoding what the request accepted.
type llmUpstream struct {
	arrived chan struct{}
	gate    chan struct{}
}

func newLLMUpstream() *llmUpstream {
	return &llmUpstream{arrived: make(chan struct{}, 100), gate: make(chan struct{})}
}

// openAIChunk and the others are the events of the streams.
func openAIChunk(text string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + text + `"}}]}` + "\n\n"
}

func openAIStreamBody(tokens int) (first, rest string) {
	first = openAIChunk("Hel")
	rest = openAIChunk("lo") + openAIChunk("!") +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":` +
		strconv.Itoa(tokens-1) + `,"total_tokens":` + strconv.Itoa(tokens) + "}}\n\ndata: [DONE]\n\n"
	return first, rest
}

func (u *llmUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tokens, _ := strconv.Atoi(q.Get("tokens"))
	w.Header().Set("X-Seen-Accept-Encoding", r.Header.Get("Accept-Encoding"))
	if q.Get("gzip") == "1" && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		gw := &gzipResponse{ResponseWriter: w, zw: gzip.NewWriter(w)}
		defer gw.zw.Close()
		w = gw
	}
	if q.Get("hold") == "1" {
		u.arrived <- struct{}{}
		<-u.gate
	}
	flush := func() { http.NewResponseController(w).Flush() }
	switch q.Get("stream") {
	case "openai":
		w.Header().Set("Content-Type", "text/event-stream")
		first, rest := openAIStreamBody(tokens)
		io.WriteString(w, first)
		flush()
		if q.Get("first") == "1" {
			<-u.gate
		}
		io.WriteString(w, rest)
	case "anthropic":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n")
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n")
		flush()
		if q.Get("abort") == "1" {
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		}
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":"+strconv.Itoa(tokens-25)+"}}\n\n")
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		total := strconv.Itoa(tokens)
		if v := q.Get("usage"); v != "" {
			total = v
		}
		pad, _ := strconv.Atoi(q.Get("pad"))
		fmt.Fprintf(w, `{"id":"chatcmpl-1","choices":[{"message":{"content":"Hello!%s"}}],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%s}}`,
			strings.Repeat("!", pad), tokens-1, total)
	}
}

// gzipResponse gzips a response, flushing what it has compressed when the
// handler flushes, as a compressing middleware in front of an LLM API does.
type gzipResponse struct {
	http.ResponseWriter
	zw *gzip.Writer
}

func (g *gzipResponse) Write(b []byte) (int, error) { return g.zw.Write(b) }

func (g *gzipResponse) FlushError() error {
	if err := g.zw.Flush(); err != nil {
		return err
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

const tokenRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 100
        unit: 1h
        algorithm: fixed_window
        cost: {body: usage.total_tokens, reserveHeader: X-Token-Reserve, max: 100}
      - api: /v1/messages
        limit: 100
        unit: 1h
        algorithm: fixed_window
        cost: {body: [message.usage.input_tokens, usage.output_tokens], reserveHeader: X-Token-Reserve}
      - api: /v1/fixed-reserve
        limit: 100
        unit: 1h
        algorithm: fixed_window
        cost: {body: usage.total_tokens, reserve: 30}
`

// tokenGW is a gateway in front of an llmUpstream, served by a real HTTP
// server so that streams stream, on the memory store or on Redis.
type tokenGW struct {
	*gw
	llm *llmUpstream
	srv *httptest.Server
}

func newTokenGW(t *testing.T, store string, redis *redistest.Server) *tokenGW {
	t.Helper()
	return newTokenGWWith(t, store, tokenRules)
}

// newTokenGWWith is newTokenGW on rules of the test's own.
func newTokenGWWith(t *testing.T, store, rules string) *tokenGW {
	t.Helper()
	var redis *redistest.Server
	llm := newLLMUpstream()
	us := httptest.NewServer(llm)
	t.Cleanup(us.Close)
	t.Cleanup(func() {
		select {
		case <-llm.gate:
		default:
			close(llm.gate)
		}
	})
	clock := gwtest.NewClock(t0)
	g := newGWWith(t, rules, us.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Now = clock.Now
		if store == "redis" {
			// A Redis of its own: the subtests of one store use the
			// same keys.
			redis = redistest.Start(t)
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
	return &tokenGW{gw: g, llm: llm, srv: srv}
}

// get sends a request through the real server and returns the response
// with its body read.
func (g *tokenGW) get(t *testing.T, target string, hdr ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+target, nil)
	req.Header.Set("X-App-Id", "app-1")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// remaining reads what is left of a limit without spending any of it: a
// response that reports 0 tokens, admitted without a reserve.
func (g *tokenGW) remaining(t *testing.T, path string) string {
	t.Helper()
	q := "?tokens=0"
	if path == "/v1/messages" {
		q = "?tokens=0&stream=openai" // no Anthropic fields: charged min
	}
	resp, _ := g.get(t, path+q)
	return resp.Header.Get("X-RateLimit-Remaining")
}

// TestTokenBudgetExact: a budget of 100 tokens admits requests while it
// has room for one token and charges each what its response reports,
// JSON or streamed, on both stores; the client gets the body unchanged.
func TestTokenBudgetExact(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		for _, kind := range []string{"json", "openai"} {
			t.Run(kind, func(t *testing.T) {
				g := newTokenGW(t, store, nil)
				query := "?tokens=30"
				want := `{"id":"chatcmpl-1","choices":[{"message":{"content":"Hello!"}}],"usage":{"prompt_tokens":1,"completion_tokens":29,"total_tokens":30}}`
				if kind == "openai" {
					query += "&stream=openai"
					first, rest := openAIStreamBody(30)
					want = first + rest
				}
				for i, wantStatus := range []int{200, 200, 200, 200, 429} {
					resp, body := g.get(t, "/v1/chat/completions"+query)
					if resp.StatusCode != wantStatus {
						t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, wantStatus)
					}
					if wantStatus == 200 && body != want {
						t.Fatalf("request %d: the client got %q, want %q", i+1, body, want)
					}
					// Remaining at admission: 100 less 30 a request.
					if wantStatus == 200 {
						if got, w := resp.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(max(100-30*i, 0)); got != w {
							t.Errorf("request %d: remaining %s, want %s", i+1, got, w)
						}
					}
				}
				if got := limitsOf(g.obs.last())[0].Charged; got != 0 {
					t.Errorf("refused request charged %d", got)
				}
			})
		}
		t.Run("anthropic", func(t *testing.T) {
			g := newTokenGW(t, store, nil)
			resp, body := g.get(t, "/v1/messages?tokens=40&stream=anthropic")
			if resp.StatusCode != 200 || !strings.HasSuffix(body, "{\"type\":\"message_stop\"}\n\n") {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
			// 25 input + 15 output, then the probe's min of 1.
			if got := g.remaining(t, "/v1/messages"); got != "60" {
				t.Errorf("remaining after 40 tokens: %s, want 60", got)
			}
		})
	})
}

// TestTokenBudgetConcurrent: requests in flight together overrun a budget
// by what their responses report when nothing is reserved, and cannot
// when each reserves its estimate at admission.
func TestTokenBudgetConcurrent(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		tests := []struct {
			name      string
			reserve   string
			admitted  int
			remaining string // after all have ended
		}{
			// Nothing counted until the responses end: all five pass,
			// and 150 tokens are charged against 100.
			{name: "without reserve", admitted: 5, remaining: "0"},
			// Each reserves 30: three fit, the fourth and fifth are
			// refused at once; each used exactly its reserve.
			{name: "with reserve", reserve: "30", admitted: 3, remaining: "10"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				g := newTokenGW(t, store, nil)
				var wg sync.WaitGroup
				codes := make(chan int, 5)
				for range 5 {
					wg.Add(1)
					done := make(chan struct{})
					go func() {
						defer wg.Done()
						var hdr []string
						if tc.reserve != "" {
							hdr = []string{"X-Token-Reserve", tc.reserve}
						}
						resp, _ := g.get(t, "/v1/chat/completions?tokens=30&hold=1", hdr...)
						codes <- resp.StatusCode
						close(done)
					}()
					// Wait until this request is held upstream or refused,
					// so that they are decided one after the other.
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
					if c == 200 {
						admitted++
					} else if c != 429 {
						t.Errorf("status %d", c)
					}
				}
				if admitted != tc.admitted {
					t.Errorf("admitted %d, want %d", admitted, tc.admitted)
				}
				if got := g.remaining(t, "/v1/chat/completions"); got != tc.remaining {
					t.Errorf("remaining %s, want %s", got, tc.remaining)
				}
			})
		}
	})
}

// TestTokenBudgetReserveSettled: a response is charged what it reports,
// more or less than its reserve, and the reserve is given back.
func TestTokenBudgetReserveSettled(t *testing.T) {
	t.Parallel()
	g := newTokenGW(t, "memory", nil)
	// Each request holds its reserve of 30 while in flight and is
	// charged what its response reports; the reserve is given back.
	for i, tokens := range []int{50, 10, 35} {
		resp, _ := g.get(t, "/v1/fixed-reserve?tokens="+strconv.Itoa(tokens))
		if resp.StatusCode != 200 {
			t.Fatalf("step %d: status %d", i, resp.StatusCode)
		}
		if got := limitsOf(g.obs.last())[0].Charged; got != int64(tokens) {
			t.Errorf("step %d: charged %d, want %d", i, got, tokens)
		}
	}
	// 100 - 95 = 5 left: not room for a reserve of 30.
	if resp, _ := g.get(t, "/v1/fixed-reserve?tokens=1"); resp.StatusCode != 429 {
		t.Errorf("past the budget: status %d, want 429", resp.StatusCode)
	}
}

// TestTokenBudgetAbortedStream: a stream that breaks mid-way is charged
// the usage it reported so far or its reserve, whichever is larger.
func TestTokenBudgetAbortedStream(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		tests := []struct {
			name, reserve, remaining string
		}{
			{"usage above the reserve", "10", "68"}, // 25 + 7 = 32 seen
			{"reserve above the usage", "40", "60"}, // 40 reserved
			{"no reserve", "", "68"},                // 32 seen
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				g := newTokenGW(t, store, nil)
				var hdr []string
				if tc.reserve != "" {
					hdr = []string{"X-Token-Reserve", tc.reserve}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/messages?tokens=40&stream=anthropic&abort=1", nil)
				req.Header.Set("X-App-Id", "app-1")
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				resp, err := g.srv.Client().Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if err == nil {
					t.Fatal("the client read the broken stream to its end without an error")
				}
				g.obs.waitFor(t, 1)
				if got := g.remaining(t, "/v1/messages"); got != tc.remaining {
					t.Errorf("remaining %s, want %s", got, tc.remaining)
				}
			})
		}
	})
}

// TestTokenStreamUnbuffered: the first event reaches the client while the
// upstream still holds the rest of the stream back.
func TestTokenStreamUnbuffered(t *testing.T) {
	t.Parallel()
	g := newTokenGW(t, "memory", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/chat/completions?tokens=30&stream=openai&first=1", nil)
	req.Header.Set("X-App-Id", "app-1")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first, rest := openAIStreamBody(30)
	br := bufio.NewReader(resp.Body)
	got := make([]byte, len(first))
	// The upstream sends the rest only once gate is closed, below: if the
	// gateway held the stream back, this read would fail at the deadline.
	if _, err := io.ReadFull(br, got); err != nil || string(got) != first {
		t.Fatalf("first event: got %q, %v; want %q", got, err, first)
	}
	close(g.llm.gate)
	tail, err := io.ReadAll(br)
	if err != nil || string(tail) != rest {
		t.Fatalf("rest: got %q, %v; want %q", tail, err, rest)
	}
	resp.Body.Close()
	g.obs.waitFor(t, 1)
	if got := limitsOf(g.obs.last())[0].Charged; got != 30 {
		t.Errorf("charged %d, want 30", got)
	}
}

// TestTokenMetrics checks gateway_token_units_total by app and plan.
func TestTokenMetrics(t *testing.T) {
	t.Parallel()
	llm := newLLMUpstream()
	us := httptest.NewServer(llm)
	t.Cleanup(us.Close)
	m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Store: "memory", Version: "test"})
	g := newGWWith(t, `
plans:
  - name: gold
    limits:
      - {api: /v1/chat/completions, limit: 1000, unit: 60, cost: {body: usage.total_tokens}}
configs:
  - appId: app-1
    plan: gold
  - appId: app-2
    limits:
      - {api: /v1/chat/completions, limit: 1000, unit: 60, cost: {body: usage.total_tokens, reserve: 50}}
`, us.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Observers = append(h.Observers, m)
	})
	g.do("POST", "/v1/chat/completions?tokens=30", "app-1")
	g.do("POST", "/v1/chat/completions?tokens=30&stream=openai", "app-1")
	g.do("POST", "/v1/chat/completions?tokens=30", "app-2") // its reserve of 50 given back
	for _, tc := range []struct {
		app, plan string
		want      float64
	}{{"app-1", "gold", 60}, {"app-2", "", 30}} {
		if got := metric(m, "gateway_token_units_total", "app", tc.app, "plan", tc.plan); got != tc.want {
			t.Errorf("tokens of %s on plan %q: got %v, want %v", tc.app, tc.plan, got, tc.want)
		}
	}
}
