package proxy

import (
	"context"
	"fmt"
	"io"
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
	store, _ := limit.NewMemory(limit.MemoryConfig{})
	return newWaitGWOn(t, rules, maxWaiting, store)
}

// newWaitGWOn is newWaitGW deciding with store.
func newWaitGWOn(t *testing.T, rules string, maxWaiting int, store limit.Store) *waitGW {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, time.Now())
	if err != nil {
		t.Fatal(err)
	}
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

// TestMaxDelayAdmitsInOrder: twelve requests at once at 2 a second with
// 5s of wait are all admitted, in order of arrival, each at the instant
// its room comes (two at once, then one every half second); a client
// that leaves while it waits is not forwarded, and its place stays
// taken (it was counted); a thirteenth, whose room would come after 5s,
// is refused at once.
func TestMaxDelayAdmitsInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newWaitGW(t, `
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 2, unit: 1, algorithm: token_bucket, maxDelay: 5s}
`, 0)
		ctx := context.Background()
		leaveCtx, leave := context.WithCancel(ctx)
		var done []<-chan int
		for i := range 12 {
			c := ctx
			if i == 4 {
				c = leaveCtx
			}
			done = append(done, g.send(c, fmt.Sprintf("r%d", i+1)))
			synctest.Wait() // decided before the next arrives
		}
		if n := g.h.Waiting(); n != 10 {
			t.Fatalf("waiting: %d, want 10", n)
		}
		if code := <-g.send(ctx, "r13"); code != 429 {
			t.Errorf("r13, whose room comes after 5s: %d, want 429 at once", code)
		}
		time.Sleep(200 * time.Millisecond)
		leave() // r5's client goes away
		for i, ch := range done {
			if code := <-ch; i != 4 && code != 200 {
				t.Errorf("r%d: %d, want 200", i+1, code)
			}
		}
		var want []string
		var wantAt []time.Duration
		for i := range 12 {
			if i == 4 {
				continue
			}
			want = append(want, fmt.Sprintf("r%d", i+1))
			wantAt = append(wantAt, time.Duration(max(i-1, 0))*500*time.Millisecond)
		}
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

// heldStore decides each call once the test lets it through gate, so
// that calls are in flight together, as the calls one round trip to
// Redis carries are.
type heldStore struct {
	limit.Store
	gate chan struct{}
}

func (g heldStore) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	<-g.gate
	return g.Store.Allow(ctx, now, reqs, res)
}

// TestMaxWaitingHoldsForDecisionsInFlight: requests whose decisions are
// in flight together take the cap's places before they are decided, so
// that between them they cannot reserve more waits than the cap: with a
// cap of 2 and a full limit (1 a second, 10s of wait), of five requests
// decided at once two wait and three are refused at once. Places go back
// once the waits end.
func TestMaxWaitingHoldsForDecisionsInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem, _ := limit.NewMemory(limit.MemoryConfig{})
		gate := make(chan struct{})
		g := newWaitGWOn(t, `
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: 1, algorithm: token_bucket, maxDelay: 10s}
`, 2, heldStore{mem, gate})
		ctx := context.Background()
		first := g.send(ctx, "r0")
		gate <- struct{}{}
		if code := <-first; code != 200 {
			t.Fatalf("first request: %d, want 200", code)
		}
		var done []<-chan int
		for i := range 5 {
			done = append(done, g.send(ctx, fmt.Sprintf("r%d", i+1)))
		}
		synctest.Wait() // all five wait for their decisions
		if n := g.h.Waiting(); n != 2 {
			t.Errorf("waiting while five are decided: %d, want 2 (the cap)", n)
		}
		for range 5 {
			gate <- struct{}{}
		}
		synctest.Wait()
		if n := g.h.Waiting(); n != 2 {
			t.Errorf("waiting once decided: %d, want 2 (the cap)", n)
		}
		atOnce, later := map[int]int{}, map[int]int{}
		var waiting []<-chan int
		for _, ch := range done {
			select {
			case code := <-ch:
				atOnce[code]++
			default:
				waiting = append(waiting, ch)
			}
		}
		for _, ch := range waiting {
			later[<-ch]++
		}
		if atOnce[429] != 3 || len(atOnce) != 1 || later[200] != 2 || len(later) != 1 {
			t.Errorf("statuses at once %v and after waiting %v, want 3 × 429 and 2 × 200", atOnce, later)
		}
		if n := g.h.Waiting(); n != 0 {
			t.Errorf("waiting at the end: %d, want 0", n)
		}
	})
}

// TestMaxWaitingNotHeldForBody: a request takes its place to wait only
// once it is ready to be decided. One whose body (which its cost
// estimate needs) has not arrived holds none, so that with a cap of 1 a
// request that needs a 1s wait still waits, and is admitted.
func TestMaxWaitingNotHeldForBody(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newWaitGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /upload
        limit: 100
        unit: 1
        algorithm: token_bucket
        maxDelay: 5s
        cost: {body: usage.total_tokens, reserve: estimate, max: 10}
      - {api: /v1/chat, limit: 1, unit: 1, algorithm: token_bucket, maxDelay: 5s}
`, 1)
		body, send := io.Pipe()
		upload := make(chan int, 1)
		go func() {
			r := httptest.NewRequest("POST", "/upload", body)
			r.ContentLength = 100
			r.Header.Set("X-App-Id", "app-1")
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			g.h.ServeHTTP(w, r)
			upload <- w.Code
		}()
		synctest.Wait() // the upload waits for its body
		if n := g.h.Waiting(); n != 0 {
			t.Errorf("waiting while a body arrives: %d, want 0", n)
		}
		ctx := context.Background()
		if code := <-g.send(ctx, "first"); code != 200 {
			t.Fatalf("first request: %d, want 200", code)
		}
		start := time.Now()
		if code := <-g.send(ctx, "second"); code != 200 || time.Since(start) != time.Second {
			t.Errorf("a request with room in 1s: %d after %v, want 200 after 1s", code, time.Since(start))
		}
		send.Write([]byte(`{"max_tokens":1}`))
		send.Close()
		if code := <-upload; code != 200 {
			t.Errorf("the upload: %d, want 200", code)
		}
		if n := g.h.Waiting(); n != 0 {
			t.Errorf("waiting at the end: %d, want 0", n)
		}
	})
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

// TestMaxDelayOnRedis: a request that waits for room is admitted at the
// instant Redis reserved for it, on Redis's clock; it runs on the real
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
// the room reserved for it: the decision was made, in the one store call,
// so the request is forwarded at its instant with the headers of that
// decision; the next request, decided while Redis is down, gets the fail
// mode's answer (open: forwarded) with none of them.
func TestMaxDelayStoreFailsDuringWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 2 * time.Second, DenyCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	// A unit of 5s: the second request still waits when a loaded machine
	// decides it seconds after the first.
	h := chatWaitHandler(t, red, 5, failmode.Open, func(http.ResponseWriter, *http.Request) {})
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
	decided := red.Stats().Decisions
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- do() }()
	// A request holds its place to wait from just before its decision
	// (offerWaits): Redis stops once the store has decided it.
	eventually.True(t, 10*time.Second, func() bool { return h.Waiting() == 1 && red.Stats().Decisions > decided },
		"the second request is not decided, waiting")
	calls := red.Stats().Calls
	srv.Stop()
	w := <-done
	if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "1" || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("after its wait, with Redis down: %d %v, want 200 with the headers of its reservation", w.Code, w.Header())
	}
	if n := red.Stats().Calls; n != calls {
		t.Errorf("the waiting request called Redis %d more times after it was decided, want none", n-calls)
	}
	w = do()
	if w.Code != 200 {
		t.Fatalf("with Redis down: %d %s, want 200 (fail open)", w.Code, w.Body)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy", "Retry-After"} {
		if v := w.Header().Get(name); v != "" {
			t.Errorf("fail_open carries %s: %q", name, v)
		}
	}
}

// TestMaxDelayFleetOnRedis: three gateways on one Redis, a request every
// 2s, 12s of wait; seven requests arrive one after the other, spread
// over the gateways. Every one is admitted with one store call, and none
// reaches the upstream before the instant its place in the fleet's queue
// allows (one at once, then one every 2s, the seventh at 12s: one every
// 2s fleet-wide); an eighth, whose room would come at 14s, is refused at
// once. Timers never fire early, so the bound holds on a loaded machine;
// nothing asserts how late. (The eighth finds the queue full only if
// the seven took less than 2s to arrive: a loaded machine has 2s for
// seven round trips.)
func TestMaxDelayFleetOnRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
	)
	up := func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.Header.Get("X-Req")] = time.Now()
		mu.Unlock()
	}
	var gws []*Handler
	var stores []*redisstore.Store
	for range 3 {
		red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 10 * time.Second, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { red.Close() })
		stores = append(stores, red)
		parsed, err := config.Parse("rules.yaml", []byte(`
configs:
  - appId: app-1
    limits:
      - {api: /v1/chat, limit: 1, unit: 2, algorithm: token_bucket, maxDelay: 12s}
`))
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := ruleset.Compile(parsed, time.Now())
		h, err := NewHandler(HandlerConfig{Rules: rs, Store: red, FailMode: failmode.Closed, Logger: slog.New(slog.DiscardHandler), Upstream: http.HandlerFunc(up)})
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, h)
	}
	decided := func() int64 {
		var n int64
		for _, s := range stores {
			n += s.Stats().Decisions
		}
		return n
	}
	send := func(i int) <-chan int {
		done := make(chan int, 1)
		go func() {
			r := httptest.NewRequest("GET", "/v1/chat", nil)
			r.Header.Set("X-App-Id", "app-1")
			r.Header.Set("X-Req", fmt.Sprint(i))
			w := httptest.NewRecorder()
			gws[i%3].ServeHTTP(w, r)
			done <- w.Code
		}()
		return done
	}
	start := time.Now()
	var done []<-chan int
	for i := range 7 {
		done = append(done, send(i))
		// Decided before the next arrives: the order of arrival is the
		// order of the requests.
		eventually.True(t, 20*time.Second, func() bool { return decided() == int64(i+1) }, "request %d is not decided", i)
	}
	if code := <-send(7); code != 429 {
		t.Errorf("the eighth, at 14s: %d, want 429 (sent %v after the first)", code, time.Since(start))
	}
	for i := range 7 {
		if code := <-done[i]; code != 200 {
			t.Errorf("request %d: %d, want 200", i, code)
		}
	}
	// One round trip per request (the first call on a fresh Redis may
	// load the script library on the way: Calls, not RoundTrips).
	var trips, decisions int64
	for _, s := range stores {
		trips, decisions = trips+s.Stats().RoundTrips, decisions+s.Stats().Decisions
	}
	if trips != 8 || decisions != 8 {
		t.Errorf("store round trips %d and decisions %d, want 8 each (one per request)", trips, decisions)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 7 {
		at, ok := arrived[fmt.Sprint(i)]
		if !ok {
			t.Fatalf("request %d never reached the upstream", i)
		}
		if earliest := start.Add(time.Duration(i) * 2 * time.Second); at.Before(earliest.Add(-50 * time.Millisecond)) {
			t.Errorf("request %d reached the upstream at +%v, before its place in the queue (+%v)", i, at.Sub(start), earliest.Sub(start))
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
