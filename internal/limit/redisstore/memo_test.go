package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// replyDropper is a loopback TCP path from a gateway to a Redis server
// that forwards every request and, while it has drops left, drops
// Redis's reply to a script call (FCALL, EVALSHA, EVAL) and closes both
// connections: Redis ran the call, and the gateway never learns what it
// answered. Its methods are safe for concurrent use.
type replyDropper struct {
	addr, target string
	drops        atomic.Int32 // replies still to drop
	dropped      atomic.Int32 // replies dropped

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newReplyDropper(t *testing.T, srv *redistest.Server) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &replyDropper{addr: ln.Addr().String(), target: srv.Addr, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.forward(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		for c := range d.conns {
			c.Close()
		}
	})
	return d
}

func (d *replyDropper) url() string { return "redis://" + d.addr }

// take reports whether a reply is to be dropped, and counts it.
func (d *replyDropper) take() bool {
	for {
		n := d.drops.Load()
		if n <= 0 {
			return false
		}
		if d.drops.CompareAndSwap(n, n-1) {
			d.dropped.Add(1)
			return true
		}
	}
}

// isScriptCall reports whether b, a request as the gateway wrote it,
// runs a script.
func isScriptCall(b []byte) bool {
	b = bytes.ToLower(b)
	return bytes.Contains(b, []byte("fcall")) || bytes.Contains(b, []byte("eval"))
}

func (d *replyDropper) forward(c net.Conn) {
	up, err := net.Dial("tcp", d.target)
	if err != nil {
		c.Close()
		return
	}
	d.mu.Lock()
	d.conns[c], d.conns[up] = struct{}{}, struct{}{}
	d.mu.Unlock()
	defer func() {
		c.Close()
		up.Close()
		d.mu.Lock()
		delete(d.conns, c)
		delete(d.conns, up)
		d.mu.Unlock()
	}()
	// script is set once a script call is sent while drops are left: the
	// next reply is its.
	var script atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if d.drops.Load() > 0 && isScriptCall(buf[:n]) {
					script.Store(true)
				}
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
			if script.Swap(false) && d.take() {
				return // Redis answered: the answer is lost
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

// memoRig is a store on a Redis server through a replyDropper.
type memoRig struct {
	srv  *redistest.Server
	drop *replyDropper
	red  *Store
	p    *limit.Params
}

// newMemoRig starts a server and a store on it through a dropper, with
// MaxBatch batch and, when evalsha, EVALSHA in place of the function
// library; its timeouts are a test's, long on a loaded machine.
func newMemoRig(t *testing.T, batch int, evalsha bool) *memoRig {
	t.Helper()
	srv := redistest.Start(t)
	drop := newReplyDropper(t, srv)
	red := newTestRedis(t, Config{URL: drop.url(), Timeout: 10 * time.Second, DialTimeout: 10 * time.Second,
		Leases: -1, DenyCacheSize: -1, MaxBatch: batch})
	red.fn.off = evalsha
	if err := red.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &memoRig{srv: srv, drop: drop, red: red,
		p: &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}}
}

// count returns field c of key in Redis (0 when absent).
func (m *memoRig) count(t *testing.T, key string) int64 {
	t.Helper()
	v, err := redistest.Field(context.Background(), m.srv.Client(), key, "c")
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return num(v)
}

// call returns a batchCall of one request for key (cost 1, or a
// charge), as Allow or a write-back would send it, with a memo unless
// bare.
func (m *memoRig) call(t *testing.T, key string, act limit.Act, bare bool) *batchCall {
	t.Helper()
	reqs := []limit.Request{{Key: key, Params: m.p, Act: act}}
	keys, tag, _, err := redisKeys(reqs)
	if err != nil {
		t.Fatal(err)
	}
	c := &batchCall{keys: keys, args: m.red.scriptArgs(time.Now(), reqs, tag, nil)}
	if !bare {
		c.memo = memoFor(reqs, m.red.memoLife())
	}
	return c
}

// TestRedisResendCountsOnce makes Redis run a request's call and loses
// its reply: the connection closes before the reply reaches the gateway,
// which sends the call again on another. Redis counts the request once,
// and the gateway gets the answer Redis gave the first time; alone
// (MaxBatch 1) and batched.
func TestRedisResendCountsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{{"alone", 1}, {"batched", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMemoRig(t, tc.batch, false)
			ctx := context.Background()
			reqs := []limit.Request{{Key: "resend|/v1", Params: m.p}}
			res := make([]limit.Result, 1)
			for i := 1; i <= 3; i++ {
				m.drop.drops.Store(1)
				before := m.red.Stats().Calls
				ok, err := m.red.Allow(ctx, time.Now(), reqs, res)
				if err != nil || !ok {
					t.Fatalf("request %d: %v %v, want admitted", i, ok, err)
				}
				if got := m.red.Stats().Calls - before; got != 2 {
					t.Fatalf("request %d: %d script calls, want 2 (the reply lost, the call sent again)", i, got)
				}
				if got, want := m.count(t, "gw:{resend}:/v1"), int64(i); got != want {
					t.Errorf("after request %d: Redis counted %d, want %d", i, got, want)
				}
				if got, want := res[0].Remaining, 100-int64(i); got != want {
					t.Errorf("request %d: Remaining %d, want %d (the first run's answer)", i, got, want)
				}
			}
			if got := m.drop.dropped.Load(); got != 3 {
				t.Errorf("%d replies dropped, want 3", got)
			}
		})
	}
}

// TestRedisResendWithoutMemoCountsTwice is the fault of
// TestRedisResendCountsOnce on a call without a memo: Redis runs it twice.
// It shows that the fault makes Redis run the call before the reply is
// lost, which is what the memo is for.
func TestRedisResendWithoutMemoCountsTwice(t *testing.T) {
	t.Parallel()
	m := newMemoRig(t, 1, false)
	c := m.call(t, "bare|/v1", limit.Take, true)
	m.drop.drops.Store(1)
	if _, err := m.red.runOnce(context.Background(), c.keys, c.args, c.memo); err != nil {
		t.Fatal(err)
	}
	if got := m.count(t, "gw:{bare}:/v1"); got != 2 {
		t.Errorf("a bare call sent again: Redis counted %d, want 2 (the fault is not what the test thinks)", got)
	}
}

// TestRedisBatchResendCountsOnce loses the reply to a batch of calls
// that Redis ran, as one script call (the function library's many) and
// as a pipeline of one script call each (EVALSHA): the batch is sent
// again, and each call is counted once, with the answers of the first
// run. The calls are admissions and charges (what write-backs send).
func TestRedisBatchResendCountsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		evalsha bool
		asOne   bool
	}{{"as one script call", false, true}, {"as a pipeline", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMemoRig(t, 0, tc.evalsha)
			ctx := context.Background()
			const n = 8
			batch := make([]*batchCall, n)
			for i := range batch {
				act := limit.Take
				if i%2 == 1 {
					act = limit.Charge
				}
				batch[i] = m.call(t, fmt.Sprintf("batch|/%d", i), act, false)
			}
			if got := m.red.asOne(batch); got != tc.asOne {
				t.Fatalf("asOne: %v, want %v", got, tc.asOne)
			}
			m.drop.drops.Store(1)
			before := m.red.Stats().Calls
			m.red.runBatch(ctx, batch)
			if got := m.drop.dropped.Load(); got != 1 {
				t.Fatalf("%d replies dropped, want 1", got)
			}
			if got := m.red.Stats().Calls - before; got != 2*n {
				t.Errorf("%d script calls, want %d (the batch sent twice)", got, 2*n)
			}
			for i, c := range batch {
				if c.err != nil || len(c.v) != 2+resultsPerLimit || c.v[0] != 1 || c.v[2] != 99 {
					t.Errorf("call %d: %v %v, want admitted with 99 left", i, c.v, c.err)
				}
				if got := m.count(t, fmt.Sprintf("gw:{batch}:/%d", i)); got != 1 {
					t.Errorf("call %d: Redis counted %d, want 1", i, got)
				}
			}
		})
	}
}

// TestRedisWriteBackResendCountsOnce writes back a local admission (a
// charge of its cost) whose every send in one flush loses its reply:
// the flush does not know whether Redis counted it, and a later flush
// sends it again with its memo. Redis counts it once.
func TestRedisWriteBackResendCountsOnce(t *testing.T) {
	t.Parallel()
	m := newMemoRig(t, 0, false)
	// Every send of the first flush loses its reply (closedConnTries);
	// the next flush's goes through.
	m.drop.drops.Store(closedConnTries)
	m.red.writeBack([]pendingWrite{{at: m.red.clock(), now: time.Now(),
		reqs: []limit.Request{{Key: "wb|/v1", Params: m.p, Cost: 3, Act: limit.Charge}}}})
	eventually.True(t, 60*time.Second, writtenBack(m.red), "60s on, the write-back still waits: %v", wbState{m.red})
	if got := m.drop.dropped.Load(); got != closedConnTries {
		t.Fatalf("%d replies dropped, want %d", got, closedConnTries)
	}
	st := m.red.Stats()
	if st.WrittenBack != 1 || st.WriteBacksDropped != 0 {
		t.Errorf("written back %d, dropped %d; want 1 and 0", st.WrittenBack, st.WriteBacksDropped)
	}
	if got := m.count(t, "gw:{wb}:/v1"); got != 3 {
		t.Errorf("Redis counted %d, want the charge's 3 once", got)
	}
}

// TestRedisReadHasNoMemo checks that a call that only reads carries no
// memo, and that a call that counts keeps one only while it may be sent
// again.
func TestRedisReadHasNoMemo(t *testing.T) {
	t.Parallel()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Hour}
	if m := memoFor([]limit.Request{{Key: "a|/", Params: p, Act: limit.Read}}, time.Second); m.key != "" {
		t.Errorf("a read: memo %q, want none", m.key)
	}
	m := memoFor([]limit.Request{{Key: "a|/", Params: p, Act: limit.Read}, {Key: "a|/x", Params: p}}, 1500*time.Millisecond)
	if m.key == "" || m.life != 1500 {
		t.Errorf("a read and a decision: memo %q for %dms, want one for 1500ms", m.key, m.life)
	}
	if n := memoFor([]limit.Request{{Key: "a|/x", Params: p}}, time.Second); n.id == m.id {
		t.Errorf("two calls share the memo %q", m.id)
	}
}

// TestRedisNoRetryByClient checks that go-redis sends no command again
// on its own: only the store does, with the call's memo.
func TestRedisNoRetryByClient(t *testing.T) {
	t.Parallel()
	red := newTestRedis(t, Config{URL: "redis://127.0.0.1:1"})
	c, ok := red.client.(*redis.Client)
	if !ok {
		t.Fatalf("client %T, want *redis.Client", red.client)
	}
	if got := c.Options().MaxRetries; got != 0 {
		t.Errorf("MaxRetries %d, want 0 (no retry)", got)
	}
}

// BenchmarkRedisMemo measures what a memo costs Redis (memo.go): the time
// Redis spends in FCALL (INFO commandstats) per call, for calls on new
// keys of one limit (the cold path, with a key budget) and on one key of
// two limits (an app total and a rule), sent alone and in batches of 64,
// without a memo and with one. Each iteration sends one batch of each, so
// that a busy machine weighs on both alike; it reports both and their
// ratio.
func BenchmarkRedisMemo(b *testing.B) {
	srv := redistest.Start(b)
	red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second, Leases: -1})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil || !red.fn.on.Load() {
		b.Fatalf("the function library is not loaded: %v", err)
	}
	p := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: time.Second, Precision: limit.DefaultPrecision}
	var seq atomic.Int64
	cold := func() []limit.Request {
		return []limit.Request{{Key: fmt.Sprintf("cold|/v1|%d", seq.Add(1)), Tag: "cold", Params: p, Overflow: "cold|/v1|overflow"}}
	}
	two := func() []limit.Request {
		return []limit.Request{{Key: "two|", Params: p}, {Key: "two|/v1", Params: p}}
	}
	for _, shape := range []struct {
		name string
		reqs func() []limit.Request
	}{{"cold", cold}, {"two limits", two}} {
		for _, size := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", shape.name, size), func(b *testing.B) {
				var usec [2]int
				n := 0
				for b.Loop() {
					for memo := range 2 {
						batch := make([]*batchCall, size)
						for i := range batch {
							reqs := shape.reqs()
							keys, tag, _, err := redisKeys(reqs)
							if err != nil {
								b.Fatal(err)
							}
							batch[i] = &batchCall{keys: keys, args: red.scriptArgs(time.Now(), reqs, tag, nil)}
							if memo == 1 {
								batch[i].memo = memoFor(reqs, red.memoLife())
							}
						}
						u0 := fcallUsec(srv)
						red.runBatch(ctx, batch)
						usec[memo] += fcallUsec(srv) - u0
						for _, c := range batch {
							if c.err != nil || c.v[0] != 1 {
								b.Fatalf("%v %v", c.v, c.err)
							}
						}
					}
					n += size
				}
				b.ReportMetric(float64(usec[0])/float64(n), "redis-µs/call")
				b.ReportMetric(float64(usec[1])/float64(n), "memo-redis-µs/call")
				b.ReportMetric(float64(usec[1])/float64(max(usec[0], 1)), "memo-ratio")
			})
		}
	}
}

// dbSize returns the number of keys in c's database but the memos of
// calls (memo.go), which Redis keeps only for a few seconds: DBSIZE less
// those.
func dbSize(ctx context.Context, c *redis.Client) (int64, error) {
	var n int64
	iter := c.Scan(ctx, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		if !strings.Contains(iter.Val(), "#done:") {
			n++
		}
	}
	return n, iter.Err()
}

// TestRedisMemosShareHashes checks where Redis keeps the memos: the
// replies of 90 calls of one tag are fields of one or two hashes (a
// period may end during the test), not a key each, so that they take no
// room in the key budget; each reply is found under its call's ID; and a
// hash lives at least the longest life of its memos: a memo of a shorter
// life written after one of a longer life does not shorten it.
func TestRedisMemosShareHashes(t *testing.T) {
	t.Parallel()
	m := newMemoRig(t, 1, false)
	ctx := context.Background()
	c := m.srv.Client()
	var ids []memo
	for range 90 {
		call := m.call(t, "memo|/v1", limit.Take, false)
		if _, err := m.red.runOnce(ctx, call.keys, call.args, call.memo); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, call.memo)
	}
	hashes, err := c.Keys(ctx, "gw:{memo}#done:*").Result()
	if err != nil || len(hashes) < 1 || len(hashes) > 2 {
		t.Fatalf("the memos' keys: %q %v, want one or two hashes", hashes, err)
	}
	for _, id := range ids {
		if ok, err := c.HExists(ctx, id.key, id.id).Result(); !ok || err != nil {
			t.Fatalf("memo %s of %s: kept %v %v, want kept", id.id, id.key, ok, err)
		}
	}
	life := time.Duration(ids[0].life) * time.Millisecond
	if left := c.PTTL(ctx, ids[0].key).Val(); left <= life || left > 2*life {
		t.Errorf("the hash lives %s more, want between one and two lives (%s)", left, life)
	}

	// A memo of an hour in the hash, then one of a second: the hash
	// keeps living two hours.
	long := m.call(t, "memo|/v1", limit.Take, false)
	long.memo.key, long.memo.life = ids[0].key, time.Hour.Milliseconds()
	keys, args := long.memo.with(long.keys, long.args)
	if err := m.red.client.FCall(ctx, m.red.fn.name, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	short := m.call(t, "memo|/v1", limit.Take, false)
	short.memo.key, short.memo.life = ids[0].key, 1000
	keys, args = short.memo.with(short.keys, short.args)
	if err := m.red.client.FCall(ctx, m.red.fn.name, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if left := c.PTTL(ctx, ids[0].key).Val(); left <= time.Hour {
		t.Errorf("after a memo of a second: the hash lives %s more, want over an hour (the memo of an hour in it)", left)
	}
}
