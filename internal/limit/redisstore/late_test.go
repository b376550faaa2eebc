package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisSlowCostsOnce stalls Redis (SIGSTOP, then SIGCONT) while
// requests come, one after the other, and admits locally every request
// Redis did not decide, as --fail-mode local does with a share that
// admits them all. Afterwards Redis has counted every admitted request
// exactly once: the call in flight when Redis stopped ran when it woke
// and is not counted again; the calls that never reached it (queued, or
// refused by the open breaker) are written back once it answers.
//
// With leases, the call in flight asked for a lease too (a request's
// call, or the next lease asked for in the background), and Redis
// counted its tokens when it woke, after its caller stopped waiting:
// they go back to Redis, not stranded there until the bucket ends.
func TestRedisSlowCostsOnce(t *testing.T) {
	t.Parallel()
	const maxStalls = 12
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name          string
		batch, leases int
	}{{"batch=0", 0, -1}, {"batch=1", 1, -1}, {"batch=0/leases", 0, 0}, {"batch=1/leases", 1, 0}} {
		batch := tc.batch
		t.Run(tc.name, func(t *testing.T) {
			// A test's timeout: a loaded machine may make a call time out
			// outside the stall too, which changes nothing here; but a
			// write-back that times out is dropped (never sent twice), so
			// it is long enough for a loaded machine to answer one.
			red, err := New(Config{URL: srv.URL(), Timeout: time.Second, DialTimeout: 10 * time.Second,
				Leases: tc.leases, MaxBatch: batch})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			p := &limit.Params{Algorithm: "fixed_window", Limit: 100000, Window: 1000 * time.Hour}
			id := strconv.Itoa(batch) + strconv.Itoa(tc.leases+1)
			key := "slow-" + id + "|/"
			g := newFailLocal(red, key, p)
			for range 10 {
				if err := g.allow(); err != nil {
					t.Fatalf("with Redis up: %v", err)
				}
			}
			// With leases, which call is in flight when Redis stops depends
			// on timing (a request's call, the next lease asked for, or
			// none while requests spend a lease): the test stalls Redis
			// again, up to 12 times in all (5 missed under load), until
			// one that asked for a lease was.
			for stalls := 1; ; stalls++ {
				// Until the breaker opens, and some more while it is open.
				g.stall(srv)
				// Until Redis decides again (the breaker's probe).
				eventually.True(t, 30*time.Second, func() bool { return g.allow() == nil },
					"Redis did not decide again within 30s of its return")
				for range 10 {
					g.allow()
				}
				// The answers to the calls in flight during the stall are
				// in, and what they say is done (written back, given back).
				eventually.True(t, 30*time.Second, func() bool { return red.wb.lateWaiting.Load() == 0 },
					"%d calls still without an answer 30s after Redis's return", red.wb.lateWaiting.Load())
				if red.leases == nil || red.leases.late.Load() > 0 || stalls == maxStalls {
					break
				}
			}
			if err := red.Close(); err != nil {
				t.Fatal(err)
			}
			st := red.Stats()
			counted, err := redistest.FieldInt(ctx, srv.Client(), "gw:{slow-"+id+"}:/", "c")
			if err != nil {
				t.Fatal(err)
			}
			var lateLeased int64
			if red.leases != nil {
				lateLeased = red.leases.late.Load()
			}
			t.Logf("admitted %d, %d of them locally (%d timed out in flight); Redis counted %d; %d tokens leased to late answers; %+v",
				g.admitted, g.local, g.late, counted, lateLeased, st)
			if g.late == 0 || g.local == g.late {
				t.Errorf("the test stalled no call in flight, or none waited: %d local, %d in flight", g.local, g.late)
			}
			if tc.leases >= 0 && lateLeased == 0 {
				t.Errorf("no call in flight during %d stalls was leased tokens: the test did not stall a lease", maxStalls)
			}
			if counted != g.admitted {
				t.Errorf("Redis counted %d, want the %d admitted, each once", counted, g.admitted)
			}
		})
	}
}

// TestRedisWriteBackWhileIdle stalls Redis while requests come and are
// admitted locally, and sends none after it wakes: the local admissions
// are written back all the same, without a request to probe Redis, and
// the tokens of leases go back. Redis's count then equals the admissions
// while the gateway runs, not only once it closes.
func TestRedisWriteBackWhileIdle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A second: a write-back that times out is dropped (never sent
	// twice), and a loaded machine can take 300ms to answer one.
	red, err := New(Config{URL: srv.URL(), Timeout: time.Second, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100000, Window: 1000 * time.Hour}
	g := newFailLocal(red, "idle|/", p)
	for range 10 {
		if err := g.allow(); err != nil {
			t.Fatalf("with Redis up: %v", err)
		}
	}
	g.stall(srv)
	// No request from here on. The leases' counts are read after the
	// write-backs: an answer that comes between the two reads grants
	// its tokens and sends them back, and a count read before it would
	// miss them, while the give-back is still on its way.
	settled := func() bool {
		if !writtenBack(red)() {
			return false
		}
		st := red.Stats()
		return st.LeaseGranted == st.LeaseSpent+st.LeaseReturned+st.LeaseExpired
	}
	eventually.True(t, 30*time.Second, settled, "30s after Redis's return, local admissions still wait to be written back or tokens to go back: %+v", red.Stats())
	counted, err := redistest.FieldInt(ctx, srv.Client(), "gw:{idle}:/", "c")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d, %d of them locally; Redis counted %d; %+v", g.admitted, g.local, counted, red.Stats())
	if g.local == 0 {
		t.Errorf("no request was admitted locally: the test stalled nothing")
	}
	if counted != g.admitted {
		t.Errorf("Redis counted %d while the gateway runs, want the %d admitted, each once", counted, g.admitted)
	}
}

// TestRedisCloseWritesBack closes the store right after a stall, while
// its breaker is still open (a backoff of an hour: no probe would go
// before it) and local admissions wait to be written back: Close lets
// them through as the probe, and Redis counts each admission once.
//
// The breaker opens at the first failure: with a higher threshold, a
// write-back of a call refused before it opened could reach Redis when it
// resumes, and close the breaker before Close (seen at load 10+). The
// timeout is long: a write-back that times out is dropped, never sent
// twice, and a loaded machine can take 300ms to answer one.
func TestRedisCloseWritesBack(t *testing.T) {
	t.Parallel()
	srv, red, g := stalledBeforeClose(t, "closing|/")
	if err := red.Close(); err != nil {
		t.Fatal(err)
	}
	counted, err := redistest.FieldInt(context.Background(), srv.Client(), "gw:{closing}:/", "c")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d, %d of them locally; Redis counted %d; %+v", g.admitted, g.local, counted, red.Stats())
	if counted != g.admitted {
		t.Errorf("Redis counted %d after Close, want the %d admitted, each once", counted, g.admitted)
	}
}

// stalledBeforeClose returns a store with a breaker that opens at the
// first failure and a backoff of an hour, which admitted 10 requests on
// key and then, through a stall of Redis, 20 or more locally, and whose
// calls in flight then got their answers: its breaker still open, its
// write-backs waiting.
func stalledBeforeClose(t *testing.T, key string) (*redistest.Server, *Store, *failLocal) {
	t.Helper()
	srv := redistest.Start(t)
	red, err := New(Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second,
		Leases: -1, BreakerBackoff: time.Hour, BreakerThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := red.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100000, Window: 1000 * time.Hour}
	g := newFailLocal(red, key, p)
	for range 10 {
		g.allow()
	}
	g.stall(srv)
	eventually.True(t, 30*time.Second, func() bool { return red.wb.lateWaiting.Load() == 0 },
		"%d calls still without an answer 30s after Redis's return", red.wb.lateWaiting.Load())
	if !red.CircuitOpen() {
		t.Fatalf("the breaker closed before Close: the test closes nothing while it is open")
	}
	return srv, red, g
}

// TestRedisCloseKeepsRefusedWriteBacks is TestRedisCloseWritesBack with
// a flush of the write-backs running as Close begins, while the breaker
// still refuses them: it keeps them for Close's last flush, which sends
// them. (That flush dropped them once the store was closing, seen under
// three test suites at once: Redis counted 22 of 30 admissions.)
func TestRedisCloseKeepsRefusedWriteBacks(t *testing.T) {
	t.Parallel()
	srv, red, g := stalledBeforeClose(t, "keeping|/")
	// The background flush, as Close marks the store closed.
	red.closed.Store(true)
	red.flushOnce(false, time.Time{})
	red.closed.Store(false)
	if n := red.wb.dropped.Load(); n != 0 {
		t.Errorf("a flush while closing dropped %d write-backs the breaker refused, want them kept", n)
	}
	if err := red.Close(); err != nil {
		t.Fatal(err)
	}
	counted, err := redistest.FieldInt(context.Background(), srv.Client(), "gw:{keeping}:/", "c")
	if err != nil {
		t.Fatal(err)
	}
	if counted != g.admitted {
		t.Errorf("Redis counted %d after Close, want the %d admitted, each once; %+v", counted, g.admitted, red.Stats())
	}
}

// failLocal sends one key's requests to a store as a gateway under
// --fail-mode local does: a request the store could not decide is
// admitted locally and handed to limit.AdmittedLocally, to be written
// back. It counts the admissions.
type failLocal struct {
	red  *Store
	reqs []limit.Request
	res  []limit.Result
	// admitted counts every admission, local those made because the
	// store failed, late those of them whose call timed out in flight.
	admitted, local, late int
}

func newFailLocal(red *Store, key string, p *limit.Params) *failLocal {
	return &failLocal{red: red, reqs: []limit.Request{{Key: key, Params: p}}, res: make([]limit.Result, 1)}
}

// allow sends one request, and returns the store's error.
func (g *failLocal) allow() error {
	ok, err := g.red.Allow(context.Background(), time.Time{}, g.reqs, g.res)
	switch {
	case err == nil && ok:
		g.admitted++
	case err != nil:
		g.admitted++
		g.local++
		if errors.Is(err, errCallTimeout) {
			g.late++
		}
		limit.AdmittedLocally(err)
	}
	return err
}

// stall pauses srv, sends requests until the store's breaker opens (and at
// least 20), and resumes srv.
func (g *failLocal) stall(srv *redistest.Server) {
	srv.Pause()
	for i := 0; i < 20 || !g.red.CircuitOpen(); i++ {
		g.allow()
	}
	srv.Resume()
}

// TestRedisWriteBackKeepsBudget writes back local admissions of new
// callers (--fail-mode local while Redis did not answer) into a database
// that holds the key budget: each is counted against its rule's overflow
// counter, as its decision would have been, and no counter is created
// past the budget.
func TestRedisWriteBackKeepsBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, perBucket, late = 16, 4, 6
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	tag := callerTags[5]
	ips := ipsInBucket(tag, perBucket+late)
	res := make([]limit.Result, 1)
	for _, ip := range ips[:perBucket] {
		if ok, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ip, p)}, res); !ok || err != nil {
			t.Fatalf("caller %s: got %v %v, want admitted", ip, ok, err)
		}
	}
	c := srv.Client()
	// Other keys fill the database up to the budget (the memos of the
	// calls above only add to it).
	fillTo(t, c, budget)
	red.wb.mu.Lock()
	for _, ip := range ips[perBucket:] {
		red.wb.queue = append(red.wb.queue, pendingWrite{reqs: admission([]limit.Request{callerReq("/", ip, p)}), at: red.clock()})
	}
	red.wb.mu.Unlock()
	red.flushOnce(false, time.Time{})
	if got := red.wb.written.Load(); got != late {
		t.Fatalf("written back: %d, want %d (dropped %d)", got, late, red.wb.dropped.Load())
	}
	for _, ip := range ips[perBucket:] {
		if n, err := c.Exists(ctx, redisKey(tag, "*|/|"+ip)).Result(); err != nil || n != 0 {
			t.Errorf("caller %s written back past the budget: its counter exists (%d %v), want none", ip, n, err)
		}
	}
	if n := callers(t, c, "gw:{"+tag+"}|*"); n != perBucket {
		t.Errorf("callers' counters: got %d, want the %d admitted before", n, perBucket)
	}
	if got, err := redistest.FieldInt(ctx, c, redisKey(tag, "*|/|overflow"), "c"); err != nil || got != late {
		t.Errorf("the overflow counter: %d (%v), want the %d written back", got, err, late)
	}
}

// TestRedisRefusedWritesBack cuts the gateway's path to Redis (new
// connections refused, open ones closed) while Redis runs on, and admits
// locally every request Redis did not decide: none of them ran in Redis,
// so each is written back once the path is restored, and none is dropped
// while its window lasts.
func TestRedisRefusedWritesBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, batch := range []int{0, 1} {
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			path := redistest.NewPath(t, srv)
			red, err := New(Config{URL: path.URL(), Timeout: time.Second, DialTimeout: 10 * time.Second,
				MaxBatch: batch, Leases: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer red.Close()
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			p := &limit.Params{Algorithm: "fixed_window", Limit: 100000, Window: 1000 * time.Hour}
			key := "refused-" + strconv.Itoa(batch) + "|/"
			g := newFailLocal(red, key, p)
			for range 3 {
				if err := g.allow(); err != nil {
					t.Fatalf("with the path open: %v", err)
				}
			}
			path.Cut()
			// The store's pooled connections through the path are closed
			// too, but a loaded machine may not have told the pool yet: a
			// call sent on one could not tell whether Redis ran it, and
			// its write-back is dropped rather than risk counting twice
			// (docs/fleet.md). This test is of refused connections, whose
			// calls never reach Redis: drain the pool first, until a ping
			// has to dial, which the cut path refuses.
			eventually.True(t, 30*time.Second, func() bool { _, err := red.Ping(ctx); return notSent(err) }, "pings through the cut path still find a connection")
			for i := 0; i < 8 || !red.CircuitOpen(); i++ {
				g.allow()
			}
			path.Restore()
			settled := writtenBack(red)
			eventually.True(t, 30*time.Second, settled, "30s after the path's return, local admissions still wait to be written back: %+v", red.Stats())
			counted, err := redistest.FieldInt(ctx, srv.Client(), "gw:{refused-"+strconv.Itoa(batch)+"}:/", "c")
			if err != nil {
				t.Fatal(err)
			}
			st := red.Stats()
			t.Logf("admitted %d, %d of them locally; Redis counted %d; %+v", g.admitted, g.local, counted, st)
			if g.local == 0 {
				t.Fatalf("no request was admitted locally: the path was not cut")
			}
			if counted != g.admitted {
				t.Errorf("Redis counted %d, want the %d admitted, each once", counted, g.admitted)
			}
			if st.WriteBacksDropped != 0 {
				t.Errorf("%d write-backs dropped though their window lasts", st.WriteBacksDropped)
			}
		})
	}
}

// TestRedisActsDecidedAlone decides a request locally while Redis cannot
// (stalled: the call runs when it wakes; or its path cut: the call never
// runs), then follows it with the acts a response brings, through the
// journal limit.AdmittedLocally returns: after the fault, Redis has
// counted exactly what was admitted and charged, and holds nothing.
func TestRedisActsDecidedAlone(t *testing.T) {
	t.Parallel()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	charge := func(key string, n int64) limit.Request {
		return limit.Request{Key: key, Params: p, Cost: n, Act: limit.Charge}
	}
	release := func(key string, n int64) limit.Request {
		return limit.Request{Key: key, Params: p, Cost: n, Act: limit.Release}
	}
	for _, tc := range []struct {
		name string
		// first is the request decided alone; then the acts after it.
		first   func(key string) limit.Request
		then    func(key string) []limit.Request
		wantC   int64
		stalled bool // stalled (ran late) rather than cut (never ran)
	}{
		{name: "hold released, stalled", stalled: true,
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Cost: 5, Act: limit.Hold} },
			then:  func(k string) []limit.Request { return []limit.Request{release(k, 5)} }},
		{name: "hold charged, stalled", stalled: true, wantC: 5,
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Cost: 5, Act: limit.Hold} },
			then:  func(k string) []limit.Request { return []limit.Request{charge(k, 5), release(k, 5)} }},
		{name: "hold released, cut",
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Cost: 5, Act: limit.Hold} },
			then:  func(k string) []limit.Request { return []limit.Request{release(k, 5)} }},
		{name: "hold charged, cut", wantC: 5,
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Cost: 5, Act: limit.Hold} },
			then:  func(k string) []limit.Request { return []limit.Request{charge(k, 5), release(k, 5)} }},
		{name: "deferred, cut", wantC: 7,
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Act: limit.Defer} },
			then:  func(k string) []limit.Request { return []limit.Request{charge(k, 7)} }},
		{name: "deferred, stalled", stalled: true, wantC: 7,
			first: func(k string) limit.Request { return limit.Request{Key: k, Params: p, Act: limit.Defer} },
			then:  func(k string) []limit.Request { return []limit.Request{charge(k, 7)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			path := redistest.NewPath(t, srv)
			// Long enough for a loaded machine outside the fault; a stalled
			// call times out after it and runs when Redis wakes.
			red, err := New(Config{URL: path.URL(), Timeout: 500 * time.Millisecond, DialTimeout: 10 * time.Second, Leases: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer red.Close()
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			key := "alone|/x"
			if tc.stalled {
				srv.Pause()
			} else {
				path.Cut()
			}
			_, err = red.Allow(ctx, time.Now(), []limit.Request{tc.first(key)}, make([]limit.Result, 1))
			if err == nil {
				t.Fatal("Redis decided during the fault")
			}
			alone := limit.AdmittedLocally(err)
			if alone == nil {
				t.Fatalf("no journal for a request decided alone (%v)", err)
			}
			if tc.stalled {
				srv.Resume()
			} else {
				path.Restore()
			}
			alone.Follow(time.Now(), tc.then(key))
			settled := writtenBack(red)
			eventually.True(t, 30*time.Second, settled, "30s after the fault, acts still wait to reach Redis: %+v", red.Stats())
			h, err := redistest.Fields(ctx, srv.Client(), "gw:{alone}:/x")
			if err != nil {
				t.Fatal(err)
			}
			num := func(v any) int64 {
				s, _ := v.(string)
				n, _ := strconv.ParseInt(s, 10, 64)
				return n
			}
			if c, held := num(h["c"]), num(h["_h"]); c != tc.wantC || held != 0 {
				t.Errorf("Redis holds c=%d, _h=%d; want c=%d, _h=0 (%+v)", c, held, tc.wantC, red.Stats())
			}
		})
	}
}

// wbState prints what writtenBack waits for when it is printed, as a
// failure message's argument: the store's Stats, the write-backs queued,
// whether a flush runs, the calls whose answers are awaited, and whether
// the breaker is open.
type wbState struct{ red *Store }

func (s wbState) String() string {
	pending, busy := wbQueued(s.red)
	return fmt.Sprintf("%+v; queued %d, flushing %v, answers awaited %d, breaker open %v", s.red.Stats(),
		pending, busy, s.red.wb.lateWaiting.Load(), s.red.CircuitOpen())
}

// wbQueued returns how many write-backs wait in red's queue, and whether a
// flush runs, in one look: a flush takes the queue, and puts back what
// must go again, while busy.
func wbQueued(red *Store) (pending int, busy bool) {
	red.wb.mu.Lock()
	defer red.wb.mu.Unlock()
	return len(red.wb.queue), red.wb.busy.Load()
}

// writtenBack returns a check that red has nothing left to write back:
// no late call without its answer (read first: an answer queues its
// write-back before it stops being awaited), no write-back queued, no
// flush running.
func writtenBack(red *Store) func() bool {
	return func() bool {
		if red.wb.lateWaiting.Load() != 0 {
			return false
		}
		pending, busy := wbQueued(red)
		return pending == 0 && !busy
	}
}

// deferredBeforeCharge returns a store on srv whose calls wait 100ms
// (the bound of a whole call: 100ms + 1s + 3 × 100ms), with warm
// connections as Config.WarmConns says, and the params of a limit of
// key that Redis admitted a deferred request of (it counts nothing until
// its charge), with no round trip left in flight (one a charge would
// wait behind, never sent, and then be written back).
func deferredBeforeCharge(t *testing.T, srv *redistest.Server, key string, warm int) (*Store, *limit.Params) {
	t.Helper()
	const timeout = 100 * time.Millisecond
	red, err := New(Config{URL: srv.URL(), Timeout: timeout, MaxTimeout: timeout, DialTimeout: time.Second, PoolTimeout: timeout,
		Leases: -1, WarmConns: warm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	ctx := context.Background()
	// A loaded machine may take more than these bounds to load the
	// script, or to decide.
	eventually.True(t, 30*time.Second, func() bool { return red.Ready(ctx) == nil }, "Redis not ready")
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	eventually.True(t, 30*time.Second, func() bool {
		_, err := red.Allow(ctx, time.Now(), []limit.Request{{Key: key, Params: p, Act: limit.Defer}}, make([]limit.Result, 1))
		return err == nil
	}, "Redis did not decide the deferred request")
	eventually.True(t, 30*time.Second, writtenBack(red), "a round trip still in flight: %v", wbState{red})
	return red, p
}

// TestRedisTimedOutChargeCountedDropped checks a charge whose own call
// timed out, Redis stopped past the call's bound: it is not sent again
// (it may still run when Redis wakes, and would count twice), so it is
// counted among the write-backs dropped, and Redis counts it at most
// once.
func TestRedisTimedOutChargeCountedDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	key := "charged|/x"
	red, p := deferredBeforeCharge(t, srv, key, 0)
	ctx := context.Background()
	srv.Pause()
	_, err := red.Allow(ctx, time.Now(), []limit.Request{{Key: key, Params: p, Cost: 7, Act: limit.Charge}}, make([]limit.Result, 1))
	if err == nil {
		srv.Resume()
		t.Fatal("Redis answered the charge while stopped")
	}
	eventually.True(t, 30*time.Second, func() bool { return red.Stats().WriteBacksDropped == 1 },
		"the timed-out charge is not counted dropped: %v", wbState{red})
	srv.Resume()
	eventually.True(t, 30*time.Second, writtenBack(red), "write-backs still pending: %v", wbState{red})
	h, err := redistest.Fields(ctx, srv.Client(), "gw:{charged}:/x")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := strconv.ParseInt(fmt.Sprint(h["c"]), 10, 64); c != 0 && c != 7 {
		t.Errorf("Redis counted %d; want the charge once (7) or, if Redis dropped the call, 0", c)
	}
	if s := red.Stats(); s.WrittenBack != 0 || s.WriteBacksDropped != 1 {
		t.Errorf("written back %d, dropped %d; want 0 and 1", s.WrittenBack, s.WriteBacksDropped)
	}
}

// TestRedisChargeOnNewConnWrittenBack checks a charge whose call took a
// connection dialled while Redis was stopped: go-redis waits for the
// answer to the connection's handshake (HELLO) before it writes the call,
// so the call was never written, and its charge is written back once
// Redis is back, counted once (not dropped as a call of unknown fate).
func TestRedisChargeOnNewConnWrittenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	key := "dialled|/x"
	red, p := deferredBeforeCharge(t, srv, key, -1)
	ctx := context.Background()
	// Redis closes the store's connections: the charge's call finds none
	// usable and dials one.
	admin := srv.Client()
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, func() bool {
		list, err := admin.ClientList(ctx).Result()
		return err == nil && strings.Count(strings.TrimSpace(list), "\n") == 0
	}, "Redis still lists the store's connections")
	srv.Pause()
	_, err := red.Allow(ctx, time.Now(), []limit.Request{{Key: key, Params: p, Cost: 7, Act: limit.Charge}}, make([]limit.Result, 1))
	if err == nil {
		srv.Resume()
		t.Fatal("Redis answered the charge while stopped")
	}
	// The call's round trip ends (its bound passes) while Redis is
	// stopped: its fate is then settled, and the charge queued.
	eventually.True(t, 30*time.Second, func() bool { return red.wb.lateWaiting.Load() == 0 },
		"the charge's round trip did not end: %v", wbState{red})
	srv.Resume()
	eventually.True(t, 30*time.Second, func() bool {
		return writtenBack(red)() && red.Stats().WrittenBack == 1
	}, "the charge was not written back: %v", wbState{red})
	h, err := redistest.Fields(ctx, admin, "gw:{dialled}:/x")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := strconv.ParseInt(fmt.Sprint(h["c"]), 10, 64); c != 7 {
		t.Errorf("Redis counted %d; want the charge once, 7", c)
	}
	if s := red.Stats(); s.WriteBacksDropped != 0 {
		t.Errorf("dropped %d; want 0: the call was never written", s.WriteBacksDropped)
	}
}

// newBoundStore returns a store on url, ready, closed when the test ends,
// with no leases nor deny cache, whose callers wait 100ms for Redis and
// whose whole call is bounded at 100ms + 1s + 3 × 1s; with breaker, its
// breaker opens at the first failure and waits an hour before a probe.
func newBoundStore(t *testing.T, url string, breaker bool) *Store {
	t.Helper()
	cfg := Config{URL: url, Timeout: 100 * time.Millisecond, MaxTimeout: time.Second, DialTimeout: time.Second,
		PoolTimeout: 100 * time.Millisecond, Leases: -1, DenyCacheSize: -1}
	if breaker {
		cfg.BreakerThreshold, cfg.BreakerBackoff = 1, time.Hour
	}
	red, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	eventually.True(t, 30*time.Second, func() bool { return red.Ready(context.Background()) == nil }, "Redis not ready")
	return red
}

// TestRedisCloseAwaitsLateCalls closes a store while a call whose caller
// stopped waiting is still in flight, Redis stopped, and its request was
// admitted locally: Close waits for the call's answer (Redis, back,
// denies it: the key is full) and writes the admission back. Closing the
// client under the call lost its answer, and the write-back with it.
func TestRedisCloseAwaitsLateCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newBoundStore(t, srv.URL(), false)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 1, Window: 1000 * time.Hour}
	g := newFailLocal(red, "closing-late|/", p)
	eventually.True(t, 30*time.Second, func() bool { return g.allow() == nil }, "Redis did not decide the first request")
	eventually.True(t, 30*time.Second, writtenBack(red), "a round trip still in flight: %v", wbState{red})
	srv.Pause()
	if err := g.allow(); err == nil {
		srv.Resume()
		t.Fatal("Redis answered while stopped")
	}
	if n := red.wb.lateWaiting.Load(); n != 1 {
		srv.Resume()
		t.Fatalf("%d calls in flight after their callers stopped waiting, want 1: %v", n, wbState{red})
	}
	closed := make(chan error, 1)
	go func() { closed <- red.Close() }()
	eventually.True(t, 30*time.Second, red.closed.Load, "Close did not begin")
	srv.Resume()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	counted, err := redistest.FieldInt(ctx, srv.Client(), "gw:{closing-late}:/", "c")
	if err != nil {
		t.Fatal(err)
	}
	if counted != 2 {
		t.Errorf("Redis counted %d after Close, want 2: the request it admitted and the one admitted locally; %v", counted, wbState{red})
	}
}

// TestRedisLastFlushWaitsForRedis closes a store whose write-backs wait
// for Redis, stopped, with its breaker open: the last flush's probe waits
// for its answer up to the bound of a call, not a caller's wait, so that
// a Redis back meanwhile counts every local admission, the probe's and
// then the others'. (It waited a caller's 100ms, then dropped them all.)
func TestRedisLastFlushWaitsForRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newBoundStore(t, srv.URL(), true)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	g := newFailLocal(red, "last-flush|/", p)
	srv.Pause()
	// The first call is written and left unanswered (Redis runs it when
	// it wakes); it opens the breaker, which refuses the next four.
	for range 5 {
		if g.allow() == nil {
			srv.Resume()
			t.Fatal("Redis answered while stopped")
		}
	}
	eventually.True(t, 30*time.Second, func() bool { return red.wb.lateWaiting.Load() == 0 },
		"the first call's round trip did not end: %v", wbState{red})
	if pending, _ := wbQueued(red); pending != 4 {
		srv.Resume()
		t.Fatalf("%d write-backs queued, want the 4 the breaker refused: %v", pending, wbState{red})
	}
	closed := make(chan error, 1)
	go func() { closed <- red.Close() }()
	// Redis wakes while the last flush's probe waits for it (or once
	// Close has returned without waiting).
	eventually.True(t, 30*time.Second, func() bool {
		return red.closed.Load() && red.wb.lateWaiting.Load() == 1 || len(closed) > 0
	}, "the last flush's probe is not in flight: %v", wbState{red})
	srv.Resume()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	counted, err := redistest.FieldInt(ctx, srv.Client(), "gw:{last-flush}:/", "c")
	if err != nil {
		t.Fatal(err)
	}
	if counted != 5 {
		t.Errorf("Redis counted %d after Close, want the 5 admitted locally, each once; %v", counted, wbState{red})
	}
}

// TestRedisTimedOutWriteBackNotSentAgain checks a write-back whose own
// send was written to Redis and timed out, Redis stopped: it may still
// run from Redis's socket buffer when Redis wakes, and a first send looks
// for no memo, so a send again could count it twice. It is dropped and
// counted dropped, never sent again, and Redis counts the local admission
// at most once.
func TestRedisTimedOutWriteBackNotSentAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := redistest.NewPath(t, srv)
	// The breaker's backoff is long: the test starts each flush itself.
	red := newBoundStore(t, path.URL(), true)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	g := newFailLocal(red, "resent-wb|/", p)
	eventually.True(t, 30*time.Second, func() bool { return g.allow() == nil }, "Redis did not decide the first request")
	// A local admission whose call never reached Redis (the path cut,
	// the pool drained first): its write-back waits for the breaker.
	path.Cut()
	eventually.True(t, 30*time.Second, func() bool { _, err := red.Ping(ctx); return notSent(err) }, "pings through the cut path still find a connection")
	if err := g.allow(); err == nil || !notSent(err) {
		t.Fatalf("a call through the cut path: %v, want it refused", err)
	}
	eventually.True(t, 30*time.Second, func() bool { n, busy := wbQueued(red); return n == 1 && !busy }, "the local admission is not queued: %v", wbState{red})
	// A connection in the pool, open to Redis, which then stops: the
	// write-back's send is written, and not answered.
	path.Restore()
	eventually.True(t, 30*time.Second, func() bool { _, err := red.Ping(ctx); return err == nil }, "no ping through the restored path")
	srv.Pause()
	red.nodes.probeNow()
	red.flushWriteBacks()
	// Its send ends (the bound of a call passes) with Redis still
	// stopped: its fate is unknown, and the next flush drops it.
	eventually.True(t, 30*time.Second, func() bool {
		n, busy := wbQueued(red)
		return red.wb.lateWaiting.Load() == 0 && n == 1 && !busy
	}, "the write-back's send did not end: %v", wbState{red})
	srv.Resume()
	red.nodes.probeNow()
	red.flushWriteBacks()
	eventually.True(t, 30*time.Second, writtenBack(red), "write-backs still pending: %v", wbState{red})
	if s := red.Stats(); s.WrittenBack != 0 || s.WriteBacksDropped != 1 {
		t.Errorf("written back %d, dropped %d; want 0 and 1: a send that timed out is not sent again", s.WrittenBack, s.WriteBacksDropped)
	}
	// The send Redis read before it stopped runs when it wakes (once).
	eventually.True(t, 30*time.Second, func() bool {
		c, err := redistest.FieldInt(ctx, srv.Client(), "gw:{resent-wb}:/", "c")
		return err == nil && c == g.admitted
	}, "Redis did not count the local admission's send once it woke (admitted %d)", g.admitted)
}

// TestRedisFlushKeepsToItsDeadline checks the deadline of a flush (the
// last one's, in Close): once it has passed, the flush sends nothing, and
// in the last flush drops what is pending, counted; before it, the same
// write-backs are sent and counted in Redis.
func TestRedisFlushKeepsToItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, Leases: -1, DenyCacheSize: -1})
	redistest.Ready(t, red)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	queue := func(key string, n int) {
		red.wb.mu.Lock()
		defer red.wb.mu.Unlock()
		for range n {
			red.wb.queue = append(red.wb.queue, pendingWrite{at: red.clock(), now: time.Now(),
				reqs: []limit.Request{{Key: key, Params: p}}})
		}
	}
	calls := red.Stats().Calls
	queue("deadline|/passed", 3)
	red.flushOnce(true, time.Now())
	if s := red.Stats(); s.Calls != calls || s.WriteBacksDropped != 3 || s.WrittenBack != 0 {
		t.Errorf("past its deadline, the last flush made %d calls, dropped %d, wrote back %d; want 0, 3, 0",
			s.Calls-calls, s.WriteBacksDropped, s.WrittenBack)
	}
	if n, _ := wbQueued(red); n != 0 {
		t.Errorf("%d write-backs still queued after the last flush", n)
	}
	if n, err := srv.Client().Exists(ctx, "gw:{deadline}:/passed").Result(); err != nil || n != 0 {
		t.Errorf("Redis holds a counter (%d, %v) of the write-backs dropped; want none", n, err)
	}
	queue("deadline|/ahead", 3)
	red.flushOnce(true, time.Now().Add(time.Minute))
	if s := red.Stats(); s.WriteBacksDropped != 3 || s.WrittenBack != 3 {
		t.Errorf("before its deadline, the last flush dropped %d, wrote back %d in all; want 3 and 3", s.WriteBacksDropped, s.WrittenBack)
	}
	if c, err := redistest.FieldInt(ctx, srv.Client(), "gw:{deadline}:/ahead", "c"); err != nil || c != 3 {
		t.Errorf("Redis counted %d (%v) of the write-backs sent; want 3", c, err)
	}
}
