package redisstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A fate is what a fatePath does with a script call it holds.
type fate int

const (
	// fateForward sends it on, and its reply back.
	fateForward fate = iota
	// fateRan sends it on to Redis, which runs it, drops the reply and
	// cuts the path: the gateway never learns that it ran.
	fateRan
	// fateNeverRan cuts the path without sending it on: Redis never
	// sees it.
	fateNeverRan
)

// fatePath is a loopback TCP path from a gateway to a Redis server that
// holds the next script call naming a mark (arm) until the test gives
// its fate. A cut closes every connection through the path, and each
// new one at once (its first command meets a closed connection), until
// restore. Its methods are safe for concurrent use.
type fatePath struct {
	addr, target string
	held         chan struct{} // receives when a call is held
	fates        chan fate     // its fate

	mu    sync.Mutex
	mark  []byte // nil: none armed
	cut   bool
	conns map[net.Conn]struct{}
}

func newFatePath(t *testing.T, srv *redistest.Server) *fatePath {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fatePath{addr: ln.Addr().String(), target: srv.Addr, held: make(chan struct{}, 1), fates: make(chan fate, 1),
		conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *fatePath) url() string { return "redis://" + p.addr }

// arm makes the path hold the next script call whose command holds mark.
func (p *fatePath) arm(mark string) {
	p.mu.Lock()
	p.mark = []byte(mark)
	p.mu.Unlock()
}

// await waits for the path to hold a call, and gives it f.
func (p *fatePath) await(t *testing.T, f fate) {
	t.Helper()
	select {
	case <-p.held:
	case <-time.After(60 * time.Second):
		t.Fatal("60s on, no call came for the path to hold")
	}
	p.fates <- f
}

// cutAll closes every connection, and those that come until restore.
func (p *fatePath) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *fatePath) restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// holds reports whether b, a command as the gateway wrote it, is the
// call to hold, and disarms the path if so.
func (p *fatePath) holds(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mark == nil || !isScriptCall(b) || !bytes.Contains(b, p.mark) {
		return false
	}
	p.mark = nil
	return true
}

func (p *fatePath) forward(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		c.Close()
		up.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
	}()
	// drop is set once a held call that ran is sent on: its reply is
	// lost, and the path cut.
	var drop atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 && p.holds(buf[:n]) {
				p.held <- struct{}{}
				switch <-p.fates {
				case fateRan:
					drop.Store(true)
				case fateNeverRan:
					p.cutAll()
					return
				}
			}
			if n > 0 {
				if _, err := up.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				up.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if drop.Load() {
				p.cutAll()
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// unknownRig is a store on a Redis server through a fatePath, with a
// test's timeouts: its callers wait timeout for an answer, and a call's
// round trip lasts up to 20s + 3 × timeout, long on a loaded machine; the
// memo of its calls lives twice that. skew moves the store's clock.
type unknownRig struct {
	srv  *redistest.Server
	path *fatePath
	red  *Store
	p    *limit.Params
	skew atomic.Int64
}

func newUnknownRig(t *testing.T, batch int, timeout time.Duration) *unknownRig {
	t.Helper()
	u := &unknownRig{srv: redistest.Start(t), p: &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}}
	u.path = newFatePath(t, u.srv)
	u.red = newTestRedis(t, Config{URL: u.path.url(), Timeout: timeout, DialTimeout: 20 * time.Second,
		Leases: -1, DenyCacheSize: -1, MaxBatch: batch,
		Now: func() time.Time { return time.Now().Add(time.Duration(u.skew.Load())) }})
	if err := u.red.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return u
}

// count returns the count of key in Redis (0 when absent).
func (u *unknownRig) count(t *testing.T, key string) int64 {
	t.Helper()
	return num(counterFields(t, u.srv.Client(), key)["c"])
}

// late sends a request for reqs that the path holds until its caller
// stops waiting, as --fail-mode local then admits it locally; it
// returns the store's error.
func (u *unknownRig) late(t *testing.T, reqs ...limit.Request) error {
	t.Helper()
	_, err := u.red.Allow(context.Background(), time.Now(), reqs, make([]limit.Result, len(reqs)))
	if !errors.Is(err, errCallTimeout) {
		t.Fatalf("a call the path holds: %v, want its caller to stop waiting", err)
	}
	limit.AdmittedLocally(err)
	return err
}

// unknownFate waits until the call of err, a lateError, has an unknown
// fate.
func (u *unknownRig) unknownFate(t *testing.T, err error) {
	t.Helper()
	var le *lateError
	if !errors.As(err, &le) {
		t.Fatalf("%v: not a late call's error", err)
	}
	eventually.True(t, 60*time.Second, func() bool { return u.red.wb.lateWaiting.Load() == 0 },
		"60s on, the held call's round trip has not ended")
	if got := le.call.outcomeOf(); got != lateUnknown {
		t.Fatalf("the held call's outcome: %d, want lateUnknown (%d): the fault is not what the test thinks", got, lateUnknown)
	}
}

// TestRedisUnknownFateWritesBackOnce admits a request locally whose call
// its caller stopped waiting for, and whose connection then dies: the
// gateway cannot tell whether Redis ran it. In one case Redis ran it
// (its reply lost), in the other it never saw it; every send after is
// cut until the path is restored. The local admission is written back
// under the call's memo, marked as sent again: Redis counts it exactly
// once in both cases, alone and through the batcher, and for a request
// whose second limit is deferred (its write-back charges one limit, and
// gets the reply Redis kept of two). Written back without the memo, the
// first case counts twice; not written back, the second counts none.
func TestRedisUnknownFateWritesBackOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		batch    int
		fate     fate
		deferred bool
	}{
		{"ran/alone", 1, fateRan, false},
		{"never ran/alone", 1, fateNeverRan, false},
		{"ran/batcher", 0, fateRan, false},
		{"never ran/batcher", 0, fateNeverRan, false},
		{"ran/deferred beside", 1, fateRan, true},
		{"never ran/deferred beside", 1, fateNeverRan, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := newUnknownRig(t, tc.batch, time.Second)
			reqs := []limit.Request{{Key: "unknown|/v1", Params: u.p}}
			if tc.deferred {
				reqs = append(reqs, limit.Request{Key: "unknown|/later", Params: u.p, Act: limit.Defer})
			}
			if ok, err := u.red.Allow(context.Background(), time.Now(), reqs, make([]limit.Result, len(reqs))); !ok || err != nil {
				t.Fatalf("before the fault: %v %v, want admitted", ok, err)
			}
			u.path.arm("{unknown}")
			err := u.late(t, reqs...)
			u.path.await(t, tc.fate)
			u.unknownFate(t, err)
			u.path.restore()
			eventually.True(t, 60*time.Second, writtenBack(u.red), "60s on, the write-back still waits: %v", wbState{u.red})
			if got := u.count(t, "gw:{unknown}:/v1"); got != 2 {
				t.Errorf("Redis counted %d, want 2: one admitted by Redis, one locally, each once", got)
			}
			if got := u.count(t, "gw:{unknown}:/later"); got != 0 {
				t.Errorf("the deferred limit: Redis counted %d, want 0 (no charge came)", got)
			}
			if st := u.red.Stats(); st.WrittenBack != 1 || st.WriteBacksDropped != 0 {
				t.Errorf("written back %d, dropped %d; want 1 and 0", st.WrittenBack, st.WriteBacksDropped)
			}
		})
	}
}

// TestRedisUnknownFateActsOnce sends the acts that follow a response
// that Redis decided, a charge and the release of what the request held,
// in a call whose connection dies after it was sent: Redis ran it (its
// reply lost), or never saw it. The call goes again under its memo,
// marked: Redis counts the charge once and gives the units back once in
// both cases. Written back without the memo, the first case charges
// twice; with its releases only, as before, the second charges nothing.
func TestRedisUnknownFateActsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
		fate  fate
	}{
		{"ran/alone", 1, fateRan},
		{"never ran/alone", 1, fateNeverRan},
		{"ran/batcher", 0, fateRan},
		{"never ran/batcher", 0, fateNeverRan},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := newUnknownRig(t, tc.batch, time.Second)
			ctx := context.Background()
			hold := []limit.Request{{Key: "acts|/v1", Params: u.p, Cost: 5, Act: limit.Hold}}
			if ok, err := u.red.Allow(ctx, time.Now(), hold, make([]limit.Result, 1)); !ok || err != nil {
				t.Fatalf("the hold: %v %v, want admitted", ok, err)
			}
			u.path.arm("{acts}")
			_, err := u.red.Allow(ctx, time.Now(), []limit.Request{
				{Key: "acts|/v1", Params: u.p, Cost: 5, Act: limit.Charge},
				{Key: "acts|/v1", Params: u.p, Cost: 5, Act: limit.Release},
			}, make([]limit.Result, 2))
			if !errors.Is(err, errCallTimeout) {
				t.Fatalf("the acts' call the path holds: %v, want its caller to stop waiting", err)
			}
			u.path.await(t, tc.fate)
			u.unknownFate(t, err)
			u.path.restore()
			eventually.True(t, 60*time.Second, writtenBack(u.red), "60s on, the write-back still waits: %v", wbState{u.red})
			h := counterFields(t, u.srv.Client(), "gw:{acts}:/v1")
			if c, held := num(h["c"]), num(h["_h"]); c != 5 || held != 0 {
				t.Errorf("Redis holds c=%d, _h=%d; want c=5, _h=0: the charge counted once, the units given back", c, held)
			}
			if st := u.red.Stats(); st.WrittenBack != 1 || st.WriteBacksDropped != 0 {
				t.Errorf("written back %d, dropped %d; want 1 and 0", st.WrittenBack, st.WriteBacksDropped)
			}
		})
	}
}

// TestRedisUnknownFateDroppedPastMemo is TestRedisUnknownFateWritesBackOnce
// with Redis back only once the call's memo may be gone: the store's
// clock is moved past it, and Redis has forgotten the memo of the call
// it ran. The local admission is dropped, and counted dropped: sent now,
// it would be counted a second time.
func TestRedisUnknownFateDroppedPastMemo(t *testing.T) {
	t.Parallel()
	u := newUnknownRig(t, 1, time.Second)
	ctx := context.Background()
	const key = "past|/v1"
	u.path.arm("{past}")
	err := u.late(t, limit.Request{Key: key, Params: u.p})
	u.skew.Store(int64(u.red.memoLife()))
	u.path.await(t, fateRan)
	u.unknownFate(t, err)
	memos, err := u.srv.Client().Keys(ctx, "gw:{past}#done:*").Result()
	if err != nil || len(memos) != 1 {
		t.Fatalf("the memos of the call that ran: %q %v, want one", memos, err)
	}
	if err := u.srv.Client().Del(ctx, memos...).Err(); err != nil {
		t.Fatal(err)
	}
	u.path.restore()
	u.red.flushWriteBacks()
	eventually.True(t, 60*time.Second, writtenBack(u.red), "60s on, the write-back still waits: %v", wbState{u.red})
	if got := u.count(t, "gw:{past}:/v1"); got != 1 {
		t.Errorf("Redis counted %d, want 1 (the call that ran, once)", got)
	}
	if st := u.red.Stats(); st.WrittenBack != 0 || st.WriteBacksDropped != 1 {
		t.Errorf("written back %d, dropped %d; want 0 and 1", st.WrittenBack, st.WriteBacksDropped)
	}
}

// TestRedisUnknownFateInOneScriptCall admits locally two requests whose
// calls went to Redis in one script call (a batch, redis_entry.lua many)
// whose fate is then unknown: Redis ran it and its reply was lost, or it
// never saw it; every connection after is cut until the path is
// restored. The batch has one memo for all its calls, which the
// write-back of one would find for the other: each write-back looks
// whether Redis keeps it, and goes (with a memo of its own) only if not.
// Redis counts each request exactly once. (Not written back, the second
// case counts none; written back under the batch's memo, the second
// request's write-back finds the first's reply and counts none.) So are
// two calls of acts (a charge and the release of a hold) in one script
// call counted once each: with their releases only, as before, the second
// case charges nothing.
func TestRedisUnknownFateInOneScriptCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fate fate
		acts bool
	}{{"ran", fateRan, false}, {"never ran", fateNeverRan, false}, {"acts/ran", fateRan, true}, {"acts/never ran", fateNeverRan, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The queued calls wait in the queue up to the timeout: long
			// enough for the test to see them there and let the first call
			// through.
			u := newUnknownRig(t, 0, 10*time.Second)
			ctx := context.Background()
			if tc.acts {
				for _, key := range []string{"both|/a", "both|/b"} {
					hold := []limit.Request{{Key: key, Params: u.p, Cost: 5, Act: limit.Hold}}
					if ok, err := u.red.Allow(ctx, time.Now(), hold, make([]limit.Result, 1)); !ok || err != nil {
						t.Fatalf("the hold: %v %v, want admitted", ok, err)
					}
				}
			}
			// The first call is held in flight, so that the next two queue
			// behind it and go together.
			u.path.arm("{first}")
			firstDone := make(chan struct{})
			go func() {
				defer close(firstDone)
				u.red.Allow(ctx, time.Now(), []limit.Request{{Key: "first|/", Params: u.p}}, make([]limit.Result, 1))
			}()
			select {
			case <-u.path.held:
			case <-time.After(60 * time.Second):
				t.Fatal("60s on, the first call did not come")
			}
			q := u.red.batcherFor(u.red.nodes.single)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, key := range []string{"both|/a", "both|/b"} {
				wg.Go(func() {
					if tc.acts {
						_, errs[i] = u.red.Allow(ctx, time.Now(), []limit.Request{
							{Key: key, Params: u.p, Cost: 5, Act: limit.Charge},
							{Key: key, Params: u.p, Cost: 5, Act: limit.Release},
						}, make([]limit.Result, 2))
						return
					}
					_, errs[i] = u.red.Allow(ctx, time.Now(), []limit.Request{{Key: key, Params: u.p}}, make([]limit.Result, 1))
					limit.AdmittedLocally(errs[i])
				})
			}
			eventually.True(t, 60*time.Second, func() bool {
				q.mu.Lock()
				defer q.mu.Unlock()
				return len(q.queue) == 2
			}, "the two calls did not queue")
			u.path.arm("{both}")
			u.path.fates <- fateForward
			<-firstDone
			select {
			case <-u.path.held:
			case <-time.After(60 * time.Second):
				t.Fatal("60s on, the batch did not come")
			}
			wg.Wait()
			u.path.fates <- tc.fate
			for i, err := range errs {
				if !errors.Is(err, errCallTimeout) {
					t.Fatalf("call %d: %v, want its caller to stop waiting", i, err)
				}
				u.unknownFate(t, err)
				var le *lateError
				if errors.As(err, &le) && !le.call.together {
					t.Fatalf("call %d did not go in one script call with the other", i)
				}
			}
			u.path.restore()
			eventually.True(t, 60*time.Second, writtenBack(u.red), "60s on, write-backs still wait: %v", wbState{u.red})
			for _, key := range []string{"gw:{both}:/a", "gw:{both}:/b"} {
				h := counterFields(t, u.srv.Client(), key)
				want := int64(1)
				if tc.acts {
					want = 5
				}
				if c, held := num(h["c"]), num(h["_h"]); c != want || held != 0 {
					t.Errorf("%s: Redis holds c=%d, _h=%d; want c=%d, _h=0", key, c, held, want)
				}
			}
			if st := u.red.Stats(); st.WrittenBack != 2 || st.WriteBacksDropped != 0 {
				t.Errorf("written back %d, dropped %d; want 2 and 0", st.WrittenBack, st.WriteBacksDropped)
			}
		})
	}
}

// TestRedisUnknownFateTimedOut gives a late call, admitted locally, the
// failure its round trip ended with: a connection closed after the call
// was sent (Redis did not run it here), or a timeout. The first is
// written back under the call's memo and counted; the second is not,
// and is counted dropped: a call that timed out may still wait in
// Redis's socket buffer, and run after its write-back (a call that timed
// out is never sent again).
func TestRedisUnknownFateTimedOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name    string
		err     error
		written bool
	}{
		{"connection closed", io.EOF, true},
		{"refused when sent again", resent(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"deadline", context.DeadlineExceeded, false},
		{"read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, Leases: -1, DenyCacheSize: -1})
			p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
			key := "timedout|/" + strings.ReplaceAll(tc.name, " ", "-")
			reqs := []limit.Request{{Key: key, Params: p}}
			lc := &lateCall{r: red}
			red.wb.lateWaiting.Add(1) // as await does for a call in flight
			lc.sentUnder(memoFor(reqs, red.memoLife()), red.clock(), false)
			limit.AdmittedLocally(red.lateFor(errCallTimeout, lc, time.Now(), reqs))
			lc.answered(nil, tc.err)
			eventually.True(t, 60*time.Second, writtenBack(red), "60s on, the write-back still waits: %v", wbState{red})
			want, st := int64(0), red.Stats()
			if tc.written {
				want = 1
			}
			if got := num(counterFields(t, srv.Client(), redisKey("timedout", key))["c"]); got != want {
				t.Errorf("Redis counted %d, want %d", got, want)
			}
			if st.WrittenBack != want || st.WriteBacksDropped != 1-want {
				t.Errorf("written back %d, dropped %d; want %d and %d", st.WrittenBack, st.WriteBacksDropped, want, 1-want)
			}
		})
	}
}

// TestRedisResendNotInOneScriptCall sends a call again (marked, under
// its memo, as a write-back of unknown fate or one under the memo of the
// call it follows goes) in a batch with another call, after Redis ran
// its first send: the batch goes as a pipeline, not as one script call
// (which carries one memo, its first call's, as a first send), and
// Redis answers the call sent again from its memo, counting it once.
func TestRedisResendNotInOneScriptCall(t *testing.T) {
	t.Parallel()
	m := newMemoRig(t, 0, false)
	ctx := context.Background()
	first := m.call(t, "again|/a", limit.Take, false)
	if _, err := m.red.runOnce(ctx, first.keys, first.args, first.memo); err != nil {
		t.Fatal(err)
	}
	again := m.call(t, "again|/a", limit.Take, false)
	again.memo = first.memo
	again.memo.again = true
	batch := []*batchCall{again, m.call(t, "again|/b", limit.Take, false)}
	m.red.runBatch(ctx, batch)
	for i, c := range batch {
		if c.err != nil || len(c.v) != 2+resultsPerLimit || c.v[0] != 1 {
			t.Errorf("call %d: %v %v, want admitted", i, c.v, c.err)
		}
	}
	if got := m.count(t, "gw:{again}:/a"); got != 1 {
		t.Errorf("the call sent again: Redis counted %d, want 1 (its first send's)", got)
	}
	if got := m.count(t, "gw:{again}:/b"); got != 1 {
		t.Errorf("the other call: Redis counted %d, want 1", got)
	}
}
