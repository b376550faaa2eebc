package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// concGW is a gateway with concurrency limits on a store, served over
// real connections to a real upstream.
type concGW struct {
	*gw
	url    string
	client *http.Client
	mem    *limit.MemorySlots // the memory store's slots
	rdb    *redis.Client      // the Redis store's server
}

// concStores are the stores every concurrency test runs on.
var concStores = []string{"memory", "redis"}

// newConcGW returns a gateway on store ("memory" or "redis") with rules,
// in front of upstream, whose upstream timeout is upTimeout (0: the
// default).
func newConcGW(t *testing.T, store, rules string, upstream http.Handler, upTimeout time.Duration) *concGW {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	c := &concGW{}
	opt := func(h *HandlerConfig, u *UpstreamConfig) {
		u.Timeout = upTimeout
		switch store {
		case "memory":
			c.mem = limit.NewMemorySlots()
			h.Slots = c.mem
		case "redis":
			srv := redistest.Start(t)
			c.rdb = srv.Client()
			// Test timeouts, not the product's: fail closed, a slot's
			// call that times out is a 503 (the slow-body flood's 400
			// calls got 197 under load with 5s and the default 1s dial).
			red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 30 * time.Second, DialTimeout: 30 * time.Second, PoolTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { red.Close() })
			slots, err := redisstore.NewSlots(red, redisstore.SlotsConfig{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(slots.Close)
			// Closed: a store failure shows as a 503, never as an
			// admission.
			h.Store, h.Slots, h.FailMode = red, slots, failmode.Closed
		}
	}
	c.gw = newGWWith(t, rules, up.URL, nil, opt)
	srv := httptest.NewServer(c.h)
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 100
	t.Cleanup(tr.CloseIdleConnections)
	c.url, c.client = srv.URL, &http.Client{Transport: tr}
	return c
}

// slotsLeft reports whether no slot is held: no memory count, or no slot
// key in Redis.
func (c *concGW) slotsLeft(t *testing.T) string {
	t.Helper()
	if c.mem != nil {
		if n := c.mem.Len(); n != 0 {
			return fmt.Sprintf("%d keys with slots in memory", n)
		}
		return ""
	}
	keys, err := c.rdb.Keys(context.Background(), "gwc:*").Result()
	if err != nil {
		return err.Error()
	}
	if len(keys) > 0 {
		return fmt.Sprintf("slot keys in Redis: %q", keys)
	}
	return ""
}

// waitNoSlots waits until every slot is released, in the gateway's
// metrics and in the store.
func (c *concGW) waitNoSlots(t *testing.T, limits ...[2]string) {
	t.Helper()
	eventually.True(t, 30*time.Second, func() bool {
		for _, l := range limits {
			if c.h.InFlight(l[0], l[1]) != 0 {
				return false
			}
		}
		return c.slotsLeft(t) == ""
	}, "slots still held: %s; in flight %v", c.slotsLeft(t), c.inFlight(limits))
}

func (c *concGW) inFlight(limits [][2]string) []int64 {
	var n []int64
	for _, l := range limits {
		n = append(n, c.h.InFlight(l[0], l[1]))
	}
	return n
}

// send sends a request as app-1 with the header pairs hdr.
func (c *concGW) send(ctx context.Context, method, path string, body io.Reader, hdr ...string) (*http.Response, error) {
	r, err := http.NewRequestWithContext(ctx, method, c.url+path, body)
	if err != nil {
		return nil, err
	}
	r.Header.Set("X-App-Id", "app-1")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return c.client.Do(r)
}

// wantInFlightRefusal checks that resp is the refusal of a concurrency
// limit of n on api.
func wantInFlightRefusal(t *testing.T, resp *http.Response, api string, n int64) {
	t.Helper()
	defer resp.Body.Close()
	var body inFlightBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || body.Error != "too_many_in_flight" || body.API != api || body.Concurrency != n {
		t.Errorf("refusal: got %d %+v, want 429 too_many_in_flight on %q with concurrency %d", resp.StatusCode, body, api, n)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("refusal: Retry-After: got %q, want 1", got)
	}
}

const twoInFlightRules = `
configs:
  - appId: app-1
    limits:
      - api: /slow
        concurrency: 2
        limit: 1000
        unit: 1h
`

// TestConcurrencyThirdRequestRefused holds two requests open at the
// upstream and checks that a third is refused, counted against no rate
// limit, and that a slot is free again once one completes.
func TestConcurrencyThirdRequestRefused(t *testing.T) {
	t.Parallel()
	for _, store := range concStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			arrived, release := make(chan struct{}, 2), make(chan struct{})
			g := newConcGW(t, store, twoInFlightRules, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
			}), 0)
			ctx := context.Background()
			done := make(chan int, 2)
			for range 2 {
				go func() {
					resp, err := g.send(ctx, "GET", "/slow", nil)
					if err != nil {
						done <- 0
						return
					}
					resp.Body.Close()
					done <- resp.StatusCode
				}()
			}
			<-arrived
			<-arrived
			if n := g.h.InFlight("app-1", "/slow"); n != 2 {
				t.Errorf("in flight with two held: got %d, want 2", n)
			}
			resp, err := g.send(ctx, "GET", "/slow", nil)
			if err != nil {
				t.Fatal(err)
			}
			wantInFlightRefusal(t, resp, "/slow", 2)
			g.obs.waitFor(t, 1)
			if o := g.obs.last(); o.Decision != observe.DecisionConcurrencyLimited || o.API != "/slow" {
				t.Errorf("refusal's outcome: got %s on %q, want concurrency_limited on /slow", o.Decision, o.API)
			}
			if n := g.h.inFlight.of("app-1", "/slow").refused.Load(); n != 1 {
				t.Errorf("refusals counted: got %d, want 1", n)
			}
			close(release)
			for range 2 {
				if code := <-done; code != http.StatusOK {
					t.Errorf("held request: got %d, want 200", code)
				}
			}
			g.waitNoSlots(t, [2]string{"app-1", "/slow"})
			resp, err = g.send(ctx, "GET", "/slow", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("after the held ones completed: got %d, want 200", resp.StatusCode)
			}
			// Three were counted by the rate limit: the refused one was not.
			if got := resp.Header.Get("X-RateLimit-Remaining"); got != "997" {
				t.Errorf("X-RateLimit-Remaining: got %s, want 997", got)
			}
			g.waitNoSlots(t, [2]string{"app-1", "/slow"})
		})
	}
}

// TestConcurrencyWebSocket checks that an upgraded connection holds its
// slot until the tunnel closes.
func TestConcurrencyWebSocket(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /ws
        concurrency: 1
`
	for _, store := range concStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			g := newConcGW(t, store, rules, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijacking: %v", err)
					return
				}
				defer conn.Close()
				brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				brw.Flush()
				io.Copy(conn, brw.Reader) // echo until the client hangs up
			}), 0)
			upgrade := func() (net.Conn, *bufio.Reader, *http.Response) {
				t.Helper()
				conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gateway\r\nX-App-Id: app-1\r\n"+
					"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("reading the answer to the upgrade: %v", err)
				}
				return conn, br, resp
			}
			conn, br, resp := upgrade()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("first upgrade: got %d, want 101", resp.StatusCode)
			}
			io.WriteString(conn, "ping")
			if got := make([]byte, 4); func() bool { _, err := io.ReadFull(br, got); return err != nil || string(got) != "ping" }() {
				t.Fatalf("echo through the tunnel: got %q", got)
			}
			_, _, resp = upgrade()
			wantInFlightRefusal(t, resp, "/ws", 1)
			if n := g.h.InFlight("app-1", "/ws"); n != 1 {
				t.Errorf("in flight with the tunnel open: got %d, want 1", n)
			}
			conn.Close() // ends the tunnel, and the request
			g.waitNoSlots(t, [2]string{"app-1", "/ws"})
			if _, _, resp = upgrade(); resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade after the first closed: got %d, want 101", resp.StatusCode)
			}
		})
	}
}

const chaosRules = `
configs:
  - appId: app-1
    by: header:X-User
    concurrency: %d
    limits:
      - api: /x
        concurrency: %d
      - api: /blocked
        limit: 0
        concurrency: 1
`

// TestConcurrencySlotsAlwaysReleased sends 10,000 requests that end every
// way a request can — completed, aborted by the client mid-body, failed
// by the upstream, timed out, refused by a rate limit, refused for
// concurrency — with a reload that changes the limits halfway, and checks
// that every slot is released: the in-flight counts return to exactly 0
// and no Redis slot remains.
func TestConcurrencySlotsAlwaysReleased(t *testing.T) {
	t.Parallel()
	for _, store := range concStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/x/ok":
					io.WriteString(w, "ok")
				case "/x/abort":
					w.WriteHeader(http.StatusOK)
					io.WriteString(w, "partial")
					http.NewResponseController(w).Flush()
					<-r.Context().Done()
				case "/x/fail":
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close()
					}
				case "/x/timeout":
					<-r.Context().Done()
				}
			})
			g := newConcGW(t, store, fmt.Sprintf(chaosRules, 8, 4), up, time.Second)
			parsed, err := config.Parse("rules.yaml", []byte(fmt.Sprintf(chaosRules, 6, 3)))
			if err != nil {
				t.Fatal(err)
			}
			reloaded, err := ruleset.Compile(parsed, t0)
			if err != nil {
				t.Fatal(err)
			}

			const total, workers = 10_000, 24
			var next atomic.Int64
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for {
						i := next.Add(1)
						if i > total {
							return
						}
						if i == total/2 {
							g.h.SetRules(reloaded)
						}
						outcome := g.chaosRequest(t, rng)
						mu.Lock()
						got[outcome]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			g.waitNoSlots(t, [2]string{"app-1", ""}, [2]string{"app-1", "/x"}, [2]string{"app-1", "/blocked"})
			t.Logf("outcomes: %v", got)
			for outcome, n := range got {
				if strings.HasPrefix(outcome, "unexpected") {
					t.Errorf("%d× %s", n, outcome)
				}
			}
			for _, want := range []string{"ok 200", "abort", "fail 502", "timeout 504", "blocked"} {
				if got[want] == 0 {
					t.Errorf("no request ended as %q: the test does not exercise it", want)
				}
			}
		})
	}
}

// chaosRequest sends one request of a random kind and returns how it
// ended.
func (c *concGW) chaosRequest(t *testing.T, rng *rand.Rand) string {
	user := fmt.Sprintf("u%d", rng.IntN(8))
	var kind string
	switch p := rng.IntN(100); {
	case p < 78:
		kind = "ok"
	case p < 88:
		kind = "abort"
	case p < 93:
		kind = "fail"
	case p < 94:
		kind = "timeout"
	default:
		kind = "blocked"
	}
	path := "/x/" + kind
	if kind == "blocked" {
		path = "/blocked"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := c.send(ctx, "GET", path, nil, "X-User", user)
	if err != nil {
		return "unexpected error " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		var body inFlightBody
		json.NewDecoder(resp.Body).Decode(&body)
		switch {
		case kind == "blocked" && body.Error == "blocked":
			return "blocked"
		case body.Error == "too_many_in_flight":
			// A blocked request too: its slot is taken before the
			// rate limit refuses it and gives it back.
			return "too many"
		}
		return "unexpected 429 " + body.Error + " on " + kind
	}
	switch kind {
	case "abort":
		if resp.StatusCode == http.StatusGatewayTimeout {
			return "timeout 504" // a loaded machine can time anything out
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("unexpected %d on abort", resp.StatusCode)
		}
		b := make([]byte, 1)
		io.ReadFull(resp.Body, b)
		cancel() // the client goes away mid-body
		return "abort"
	case "ok", "fail", "timeout":
		io.Copy(io.Discard, resp.Body)
		return fmt.Sprintf("%s %d", kind, resp.StatusCode)
	}
	return fmt.Sprintf("unexpected %d on %s", resp.StatusCode, kind)
}

// dribblePost posts to path of the gateway at url as app-1, over a
// connection of its own, a chunked body of one byte every period until
// stop is closed, and returns the response's status code, or the error
// that kept it from reading one. It reads while it writes, as RFC 9112
// (section 9, Connection Management) asks of a client sending a body: a
// refusal answered before the body ends is read, whatever then happens to
// the rest of the body. net/http's Transport can report the failed write
// instead, when the gateway has closed the connection before the
// Transport's reader took the answer (a client stalled for longer than
// the gateway lingers on a refused connection).
func dribblePost(url, path string, period time.Duration, stop <-chan struct{}) string {
	host := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nX-App-Id: app-1\r\nTransfer-Encoding: chunked\r\n\r\n", path, host); err != nil {
		return err.Error()
	}
	answered := make(chan struct{})
	defer close(answered)
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-answered:
				return
			case <-stop:
				io.WriteString(conn, "0\r\n\r\n")
				return
			case <-t.C:
				if _, err := io.WriteString(conn, "1\r\nx\r\n"); err != nil {
					return // the gateway closed the connection; its answer is read below
				}
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Sprintf("%d, then %v", resp.StatusCode, err)
	}
	return fmt.Sprint(resp.StatusCode)
}

// TestConcurrencySlowBodyFlood is the slow-body flood: 400 requests from
// one caller, each sending its body a byte at a time. No more than the
// configured 5 ever reach the upstream; the others are refused at once,
// without their bodies being read.
func TestConcurrencySlowBodyFlood(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /upload
        concurrency: 5
`
	for _, store := range concStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var cur, most atomic.Int64
			g := newConcGW(t, store, rules, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := cur.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				io.Copy(io.Discard, r.Body)
				cur.Add(-1)
			}), 0)
			const flood, limit = 400, 5
			stop := make(chan struct{})
			codes := make(chan string, flood)
			for range flood {
				go func() { codes <- dribblePost(g.url, "/upload", 5*time.Millisecond, stop) }()
			}
			got := map[string]int{}
			for range flood - limit {
				got[<-codes]++
			}
			if got["429"] != flood-limit {
				t.Errorf("while %d are held: got %v, want %d× 429", limit, got, flood-limit)
			}
			eventually.True(t, 30*time.Second, func() bool { return cur.Load() == limit },
				"requests at the upstream: got %d, want %d", cur.Load(), limit)
			if n := g.h.InFlight("app-1", "/upload"); n != limit {
				t.Errorf("in flight: got %d, want %d", n, limit)
			}
			close(stop)
			for range limit {
				got[<-codes]++
			}
			if got["200"] != limit {
				t.Errorf("after the bodies ended: got %v, want %d× 200", got, limit)
			}
			if m := most.Load(); m != limit {
				t.Errorf("most requests at the upstream at once: got %d, want %d", m, limit)
			}
			g.waitNoSlots(t, [2]string{"app-1", "/upload"})
		})
	}
}
