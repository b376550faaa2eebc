package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisFaultMatrix runs each act a request brings — an admission, a
// hold (released after its response, with its charge), the release of a
// hold Redis took before the fault, and the charge of a request Redis
// admitted before it — through failmode.Failover under --fail-mode local,
// as the proxy does, while Redis fails in one way after another: its
// process stopped (SIGSTOP), the gateway's path to it refused, its
// clients killed (CLIENT KILL TYPE normal) between calls or while calls
// wait in Redis, a restart with and without its data, and the store's
// breaker open while Redis answers again. After the fault, Redis's
// counters hold exactly what was admitted and charged, no hold remains
// after its release, and no write-back was dropped (the window lasts).
// What a restart without persistence forgets — the counts from before
// it — is a documented limit (docs/fleet.md, "What holds across a fleet,
// and what does not"): those are not expected back.
func TestRedisFaultMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// args start the server; batch is the store's MaxBatch; direct
		// connects the store to the server, not through a path (through
		// a path, a stopped server's connections close only once the
		// path has seen it).
		args   []string
		batch  int
		direct bool
		// fault makes the fault and returns the function that ends it;
		// during, when not nil, runs the acts while it lasts in its
		// place (the acts then run concurrently, and must reach Redis).
		fault func(t *testing.T, f *faultRig) (heal func())
		// forgets reports that the fault loses the counts from before it.
		forgets bool
		// alone reports that the acts during the fault are decided
		// without Redis (else Redis decides them all).
		alone bool
		// timeout is the store's Timeout, if not newFaultRig's: a call
		// Redis decides after the fault's resend waits for it, however
		// long a loaded machine takes to resend it.
		timeout time.Duration
	}{
		{name: "stalled", alone: true, fault: func(t *testing.T, f *faultRig) func() {
			f.srv.Pause()
			return f.srv.Resume
		}},
		{name: "refused", alone: true, fault: func(t *testing.T, f *faultRig) func() {
			f.path.Cut()
			return f.path.Restore
		}},
		// Straight to Redis: through a path, a connection Redis closed
		// stays open on the gateway's side until the path's goroutine
		// sees it, and on a loaded machine every resend of a call could
		// take one of those.
		{name: "killed between calls", direct: true, timeout: time.Minute, fault: func(t *testing.T, f *faultRig) func() {
			f.killClients(t)
			return func() {}
		}},
		{name: "killed mid-call", batch: 1, timeout: time.Minute, fault: func(t *testing.T, f *faultRig) func() {
			// Every call waits in Redis (CLIENT PAUSE WRITE) before it
			// runs, and is killed there: it is sent again.
			c := f.srv.Client()
			if err := c.Do(context.Background(), "CLIENT", "PAUSE", "600000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			f.wait = func(n int) {
				eventually.True(t, 30*time.Second, func() bool {
					return redistest.Info(t, c, "clients")["blocked_clients"] == strconv.Itoa(n)
				}, "the acts' calls did not all reach Redis")
				f.killClients(t)
				if err := c.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
					t.Fatal(err)
				}
			}
			return func() {}
		}},
		{name: "restarted without its data", direct: true, alone: true, forgets: true, fault: func(t *testing.T, f *faultRig) func() {
			f.srv.Stop()
			return f.srv.Restart
		}},
		{name: "restarted with its data", direct: true, alone: true,
			args: []string{"--appendonly", "yes", "--appendfsync", "always"},
			fault: func(t *testing.T, f *faultRig) func() {
				f.srv.Stop()
				return f.srv.Restart
			}},
		{name: "breaker open", alone: true, fault: func(t *testing.T, f *faultRig) func() {
			// Opened by refused calls, then the path is back: Redis
			// would answer, but the breaker waits out its backoff (an
			// hour here; the probe is let through by hand).
			f.path.Cut()
			trip := []limit.Request{{Key: "trip|/", Params: f.p}}
			for !f.red.CircuitOpen() {
				f.red.Allow(context.Background(), time.Now(), trip, make([]limit.Result, 1))
			}
			f.path.Restore()
			return func() { probeAgain(f.red) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFaultRig(t, tc.args, tc.batch, tc.timeout, tc.direct, tc.name == "breaker open")
			ctx := context.Background()
			// Before the fault, Redis decides: an admission, a hold to be
			// released during the fault, a request whose charge comes
			// during it.
			admitted := 0
			if ok, v, _ := f.allow(t, limit.Request{Key: "acts|/admit"}); !ok || v != failmode.StoreDecided {
				t.Fatalf("before the fault: %v %v, want admitted by the store", ok, v)
			}
			admitted++
			okRel, vRel, _ := f.allow(t, limit.Request{Key: "acts|/release", Cost: 5, Act: limit.Hold})
			okChg, vChg, _ := f.allow(t, limit.Request{Key: "acts|/charge", Act: limit.Defer})
			if !okRel || !okChg || vRel != failmode.StoreDecided || vChg != failmode.StoreDecided {
				t.Fatalf("before the fault: %v %v, %v %v, want admitted by the store", okRel, vRel, okChg, vChg)
			}
			if tc.forgets {
				admitted = 0
			}
			heal := tc.fault(t, f)
			// During the fault, concurrently.
			var wg sync.WaitGroup
			var okAdmit, okHold bool
			var vAdmit, vHold failmode.Verdict
			var aloneHold limit.Alone
			wg.Go(func() { okAdmit, vAdmit, _ = f.allow(t, limit.Request{Key: "acts|/admit"}) })
			wg.Go(func() {
				okHold, vHold, aloneHold = f.allow(t, limit.Request{Key: "acts|/hold", Cost: 5, Act: limit.Hold})
			})
			wg.Go(func() { f.charge(vRel, nil, f.req("acts|/release", 5, "c"), f.req("acts|/release", 5, "r")) })
			wg.Go(func() { f.charge(vChg, nil, f.req("acts|/charge", 7, "c")) })
			if f.wait != nil {
				f.wait(4)
			}
			wg.Wait()
			if !okAdmit || !okHold {
				t.Fatalf("during the fault: admission %v (%v), hold %v (%v); want both admitted", okAdmit, vAdmit, okHold, vHold)
			}
			admitted++
			for _, v := range []failmode.Verdict{vAdmit, vHold} {
				if want := map[bool]failmode.Verdict{true: failmode.LocalDecided, false: failmode.StoreDecided}[tc.alone]; v != want {
					t.Errorf("during the fault: decided by %v, want %v", v, want)
				}
			}
			heal()
			// After it: the hold's response is charged and its units
			// released; one more admission.
			f.charge(vHold, aloneHold, f.req("acts|/hold", 5, "c"), f.req("acts|/hold", 5, "r"))
			eventually.True(t, 30*time.Second, func() bool {
				if f.held {
					probeAgain(f.red)
				}
				ok, v, _ := f.allow(t, limit.Request{Key: "acts|/after"})
				return ok && v == failmode.StoreDecided
			}, "Redis did not decide again within 30s of the fault's end")
			eventually.True(t, 30*time.Second, func() bool {
				if f.held {
					probeAgain(f.red)
				}
				return writtenBack(f.red)()
			}, "30s after the fault, acts still wait to reach Redis: %v", wbState{f.red})
			ok, v, _ := f.allow(t, limit.Request{Key: "acts|/admit"})
			if !ok || v != failmode.StoreDecided {
				t.Fatalf("after the fault: %v %v, want admitted by the store", ok, v)
			}
			admitted++
			for _, w := range []struct {
				key   string
				c, _h int64
			}{
				{"gw:{acts}:/admit", int64(admitted), 0},
				{"gw:{acts}:/hold", 5, 0},
				{"gw:{acts}:/release", 5, 0},
				{"gw:{acts}:/charge", 7, 0},
			} {
				h, err := redistest.Fields(ctx, f.srv.Client(), w.key)
				if err != nil {
					t.Fatal(err)
				}
				if c, held := num(h["c"]), num(h["_h"]); c != w.c || held != w._h {
					t.Errorf("%s: c=%d, _h=%d; want c=%d, _h=%d (%+v)", w.key, c, held, w.c, w._h, f.red.Stats())
				}
			}
			if n := f.red.Stats().WriteBacksDropped; n != 0 {
				t.Errorf("%d write-backs dropped, though their window lasts", n)
			}
		})
	}
}

// num reads a counter's field as a number (0 when absent).
func num(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// faultRig is a gateway on a Redis server through a path, its store
// behind --fail-mode local with a local share of 1.
type faultRig struct {
	srv  *redistest.Server
	path *redistest.Path
	red  *Store
	fo   *failmode.Failover
	p    *limit.Params
	// wait, when set by the fault, is called once the acts during the
	// fault have started, n of them: it returns when they may end.
	wait func(n int)
	// held reports that the breaker's backoff is an hour: only the test
	// lets a probe through (probeAgain).
	held bool
}

// probeAgain, while red's breaker is open or write-backs wait, lets its
// next call through as a probe and flushes the write-backs, which are
// that probe if no request comes. A test whose breaker and write-backs
// wait an hour calls it until Redis has them: on a loaded machine a probe
// may time out, or find no free connection, and then waits that hour.
// Once nothing waits it does nothing, so that the flushes it starts do
// not keep the write-backs busy.
func probeAgain(red *Store) {
	if pending, _ := wbQueued(red); red.CircuitOpen() || pending > 0 {
		red.nodes.probeNow()
		red.flushWriteBacks()
	}
}

// newFaultRig starts the server with args and the store on it, through a
// path unless direct, with MaxBatch batch and Timeout timeout (500ms if
// 0); held keeps its breaker open for an hour once it opens.
func newFaultRig(t *testing.T, args []string, batch int, timeout time.Duration, direct, held bool) *faultRig {
	t.Helper()
	srv := redistest.Start(t, args...)
	path := redistest.NewPath(t, srv)
	url := path.URL()
	if direct {
		url = srv.URL()
	}
	var backoff time.Duration
	if held {
		backoff = time.Hour
	}
	// A test's timeout, long enough for a loaded machine outside the
	// fault: a call that waits out a stall times out after it.
	if timeout == 0 {
		timeout = 500 * time.Millisecond
	}
	red, err := New(Config{URL: url, Timeout: timeout, DialTimeout: 10 * time.Second,
		Leases: -1, MaxBatch: batch, BreakerBackoff: backoff, BreakerMaxBackoff: backoff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	if err := red.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem := newTestMemory(t)
	fo, err := failmode.New(failmode.Config{Mode: failmode.Local, Store: red, Local: mem})
	if err != nil {
		t.Fatal(err)
	}
	return &faultRig{srv: srv, path: path, red: red, fo: fo, held: held,
		p: &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}}
}

// allow decides q, with the rig's params, through the failover.
func (f *faultRig) allow(t *testing.T, q limit.Request) (bool, failmode.Verdict, limit.Alone) {
	q.Params = f.p
	return f.fo.Allow(context.Background(), time.Now(), []limit.Request{q}, make([]limit.Result, 1), f.local)
}

// charge counts reqs on the store that decided their request, v, as the
// proxy does after a response. Its error is the proxy's to log: what
// the store could not count it writes back.
func (f *faultRig) charge(v failmode.Verdict, alone limit.Alone, reqs ...limit.Request) {
	f.fo.Charge(context.Background(), time.Now(), v, alone, reqs, make([]limit.Result, len(reqs)), f.local)
}

func (f *faultRig) local(int) *limit.Params { return f.p }

// req returns a charge ("c") or a release ("r") of n units on key.
func (f *faultRig) req(key string, n int64, act string) limit.Request {
	q := limit.Request{Key: key, Params: f.p, Cost: n, Act: limit.Charge}
	if act == "r" {
		q.Act = limit.Release
	}
	return q
}

// killClients kills every client of the server but the test's own
// (CLIENT KILL TYPE normal), and fails t unless it killed one.
func (f *faultRig) killClients(t *testing.T) {
	t.Helper()
	n, err := f.srv.Client().Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal").Int()
	if err != nil || n == 0 {
		t.Fatalf("CLIENT KILL TYPE normal: %d killed, %v; want the gateway's connections", n, err)
	}
}

// TestRedisWriteBackDroppedOnlyWhenWindowEnded admits requests locally
// while the store's breaker is open, on limits whose window ends before
// Redis answers again and on limits whose window lasts: only the first
// are dropped, and counted as dropped; the others are written back. A
// sliding window's admission weighs for its whole window, not only while
// its bucket lasts: it is written back after its bucket ended (dropped,
// Redis would admit its room again, up to twice the limit in a window).
func TestRedisWriteBackDroppedOnlyWhenWindowEnded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := redistest.NewPath(t, srv)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	red, err := New(Config{URL: path.URL(), Timeout: 500 * time.Millisecond, DialTimeout: 10 * time.Second,
		Leases: -1, BreakerBackoff: time.Hour, BreakerMaxBackoff: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	short := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}
	long := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	// Buckets of 30s and of 1m, windows of 1m and 10m: the clock moves
	// 2m on.
	slideShort := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Minute, Precision: 2}
	slideLong := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: 10 * time.Minute, Precision: 10}
	path.Cut()
	for !red.CircuitOpen() {
		red.Allow(ctx, time.Now(), []limit.Request{{Key: "trip|/", Params: long}}, make([]limit.Result, 1))
	}
	path.Restore()
	fo, err := failmode.New(failmode.Config{Mode: failmode.Local, Store: red, Local: newTestMemory(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*limit.Params{short, long, slideShort, slideLong} {
		reqs := []limit.Request{{Key: "ends|/" + p.Algorithm + "/" + p.Window.String(), Params: p}}
		if ok, v, _ := fo.Allow(ctx, time.Now(), reqs, make([]limit.Result, 1), func(int) *limit.Params { return p }); !ok || v != failmode.LocalDecided {
			t.Fatalf("%s: %v %v, want admitted locally", p.Window, ok, v)
		}
	}
	// Both wait for the breaker, their flush done (a flush that checked
	// the window before the clock moved on would send it after).
	eventually.True(t, 30*time.Second, func() bool {
		n, busy := wbQueued(red)
		return n == 4 && !busy
	}, "the four local admissions do not wait for the breaker: %+v", red.Stats())
	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	eventually.True(t, 30*time.Second, func() bool {
		probeAgain(red)
		return writtenBack(red)()
	}, "30s after the breaker's probe, write-backs still wait: %v", wbState{red})
	st := red.Stats()
	if st.WriteBacksDropped != 2 || st.WrittenBack != 2 {
		t.Errorf("dropped %d, written back %d; want 2 each (the ended windows', the lasting ones')", st.WriteBacksDropped, st.WrittenBack)
	}
	for _, w := range []struct {
		p    *limit.Params
		room int64
	}{{slideShort, 100}, {slideLong, 99}} {
		res := make([]limit.Result, 1)
		reqs := []limit.Request{{Key: "ends|/" + w.p.Algorithm + "/" + w.p.Window.String(), Params: w.p, Act: limit.Read}}
		if _, err := red.Allow(ctx, time.Now(), reqs, res); err != nil || res[0].Remaining != w.room {
			t.Errorf("%s: Remaining %d (%v), want %d", reqs[0].Key, res[0].Remaining, err, w.room)
		}
	}
	c := srv.Client()
	for _, w := range []struct {
		key string
		c   int64
	}{{"gw:{ends}:/fixed_window/1m0s", 0}, {"gw:{ends}:/fixed_window/1000h0m0s", 1}} {
		h, err := redistest.Field(ctx, c, w.key, "c")
		if err != nil && w.c != 0 {
			t.Fatal(err)
		}
		if got := num(h); got != w.c {
			t.Errorf("%s: c=%d, want %d", w.key, got, w.c)
		}
	}
}
