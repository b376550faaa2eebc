package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// waitGW is a handler whose upstream records when each request reached
// it, deciding on the clock of the synctest bubble it is made in.
type waitGW struct {
	h     *Handler
	mu    sync.Mutex
	order []string // the X-Req of each request the upstream served
	at    []time.Duration
	start time.Time
}

func newWaitGW(t *testing.T, rules string, maxWaiting int) *waitGW {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	store, _ := limit.NewMemory(limit.MemoryConfig{})
	g := &waitGW{start: time.Now()}
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.order = append(g.order, r.Header.Get("X-Req"))
		g.at = append(g.at, time.Since(g.start))
		g.mu.Unlock()
	})
	g.h, err = NewHandler(HandlerConfig{Rules: rs, Store: store, Upstream: up, Logger: slog.New(slog.DiscardHandler), MaxWaiting: maxWaiting})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// send runs one request in the background; its status arrives on the
// channel returned.
func (g *waitGW) send(ctx context.Context, name string) <-chan int {
	done := make(chan int, 1)
	go func() {
		r := httptest.NewRequestWithContext(ctx, "GET", "/v1/chat", nil)
		r.Header.Set("X-App-Id", "app-1")
		r.Header.Set("X-Req", name)
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		done <- w.Code
	}()
	return done
}

// One request a second (token_bucket, burst 1), and up to 2.5s of wait.
const waitRules = `
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: 1, algorithm: token_bucket, maxDelay: 2500ms}
`

// TestMaxDelayAdmitsInOrder: requests over the limit wait for room in
// order of arrival and are admitted when it comes; one that leaves gives
// its place up; one whose room would come too late is refused.
func TestMaxDelayAdmitsInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newWaitGW(t, waitRules, 0)
		ctx := context.Background()
		if code := <-g.send(ctx, "r1"); code != 200 {
			t.Fatalf("r1: %d", code)
		}
		r2 := g.send(ctx, "r2")
		synctest.Wait() // r2 waits, first in the queue
		leaveCtx, leave := context.WithCancel(ctx)
		gone := g.send(leaveCtx, "gone")
		synctest.Wait()
		r3 := g.send(ctx, "r3")
		synctest.Wait()
		r4 := g.send(ctx, "r4")
		synctest.Wait()
		if n := g.h.Waiting(); n != 4 {
			t.Fatalf("waiting: %d, want 4", n)
		}
		time.Sleep(500 * time.Millisecond)
		leave() // the client goes away
		if code := <-gone; code != 429 {
			t.Errorf("the request whose client left: %d, want 429", code)
		}
		synctest.Wait()
		if n := g.h.Waiting(); n != 3 {
			t.Errorf("waiting after one left: %d, want 3", n)
		}
		for _, tc := range []struct {
			name string
			ch   <-chan int
			want int
		}{{"r2", r2, 200}, {"r3", r3, 200}, {"r4", r4, 429}} {
			if code := <-tc.ch; code != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
			}
		}
		// r2 at 1s and r3 at 2s, one a second; r4's turn came at 2s
		// with its room at 3s, past its 2.5s.
		want := []string{"r1", "r2", "r3"}
		wantAt := []time.Duration{0, time.Second, 2 * time.Second}
		if len(g.order) != len(want) {
			t.Fatalf("served %v, want %v", g.order, want)
		}
		for i := range want {
			if g.order[i] != want[i] || g.at[i] != wantAt[i] {
				t.Errorf("served #%d: %s at %v, want %s at %v", i, g.order[i], g.at[i], want[i], wantAt[i])
			}
		}
		if n := g.h.Waiting(); n != 0 {
			t.Errorf("waiting at the end: %d", n)
		}
	})
}

// TestMaxDelayRefusesAtOnce: a request whose room comes back later than
// maxDelay, and one past the cap on waiting requests, are refused without
// waiting.
func TestMaxDelayRefusesAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		rules      string
		maxWaiting int
		waiting    int // requests left waiting when the last is refused
	}{
		{"room too late", `
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: 1, algorithm: token_bucket, maxDelay: 500ms}
`, 0, 0},
		{"no maxDelay", `
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: 1, algorithm: token_bucket}
`, 0, 0},
		{"too many waiting", waitRules, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := newWaitGW(t, tc.rules, tc.maxWaiting)
				ctx := context.Background()
				<-g.send(ctx, "r1")
				var first <-chan int
				if tc.waiting > 0 {
					first = g.send(ctx, "r2")
					synctest.Wait()
				}
				start := time.Now()
				if code := <-g.send(ctx, "late"); code != 429 {
					t.Errorf("status %d, want 429", code)
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("refused after %v, want at once", d)
				}
				if n := g.h.Waiting(); n != int64(tc.waiting) {
					t.Errorf("waiting: %d, want %d", n, tc.waiting)
				}
				if first != nil {
					if code := <-first; code != 200 {
						t.Errorf("the waiting request: %d, want 200", code)
					}
				}
			})
		})
	}
}

func TestRetryAfterJitter(t *testing.T) {
	t.Parallel()
	g := newGW(t, "configs:\n  - appId: a\n    limits:\n      - {api: /x, limit: 1, unit: 60, algorithm: fixed_window}\n",
		func(h *HandlerConfig, _ *UpstreamConfig) { h.RetryAfterJitter = 5 * time.Second })
	g.do("GET", "/x", "a")
	base := int64(60 - t0.Unix()%60)
	seen := map[string]bool{}
	for range 200 {
		w := g.do("GET", "/x", "a")
		ra := w.Header().Get("Retry-After")
		seen[ra] = true
		var n int64
		for _, c := range ra {
			n = n*10 + int64(c-'0')
		}
		if n < base || n > base+5 {
			t.Fatalf("Retry-After %s outside [%d, %d]", ra, base, base+5)
		}
	}
	if len(seen) < 2 {
		t.Errorf("200 refusals all said Retry-After %v: no jitter", seen)
	}
}

// TestMaxDelayOnRedis: a request that waits for room asks the Redis
// store again, on Redis's clock, and is admitted; it runs on the real
// clock, for about a second, and asserts no time.
func TestMaxDelayOnRedis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: no redis-server")
	}
	srv := redistest.Start(t)
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second, DenyCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	var served atomic.Int64
	h := chatWaitHandler(t, red, 1, failmode.Closed, func(http.ResponseWriter, *http.Request) { served.Add(1) })
	for i := range 3 {
		r := httptest.NewRequest("GET", "/v1/chat", nil)
		r.Header.Set("X-App-Id", "app-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("request %d: %d %s, want 200 after waiting", i+1, w.Code, w.Body)
		}
	}
	if n := served.Load(); n != 3 {
		t.Errorf("served %d, want 3", n)
	}
}

// TestMaxDelayStoreFailsDuringWait stops Redis while a request waits for
// room: the decision after the wait is the fail mode's (open: forwarded),
// and the response carries none of the refusal's rate-limit headers,
// which described a decision that no longer stands.
func TestMaxDelayStoreFailsDuringWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 2 * time.Second, DenyCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	h := chatWaitHandler(t, red, 2, failmode.Open, func(http.ResponseWriter, *http.Request) {})
	do := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/chat", nil)
		r.Header.Set("X-App-Id", "app-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do(); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("first request: %d %v", w.Code, w.Header())
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- do() }()
	eventually.True(t, 10*time.Second, func() bool { return h.Waiting() == 1 }, "the second request does not wait")
	srv.Stop()
	w := <-done
	if w.Code != 200 {
		t.Fatalf("after the wait, with Redis down: %d %s, want 200 (fail open)", w.Code, w.Body)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy", "Retry-After"} {
		if v := w.Header().Get(name); v != "" {
			t.Errorf("fail_open after a wait carries %s: %q, from the refusal before it", name, v)
		}
	}
}

// chatWaitHandler is a handler on store, under mode, whose app-1 may send
// one request to /v1/chat per unit seconds (token_bucket), waiting up to
// 30s for room, to upstream.
func chatWaitHandler(t *testing.T, store limit.Store, unit int, mode failmode.Mode, upstream http.HandlerFunc) *Handler {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(fmt.Sprintf(`
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: %d, algorithm: token_bucket, maxDelay: 30s}
`, unit)))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := ruleset.Compile(parsed, time.Now())
	h, err := NewHandler(HandlerConfig{Rules: rs, Store: store, FailMode: mode, Logger: slog.New(slog.DiscardHandler), Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
