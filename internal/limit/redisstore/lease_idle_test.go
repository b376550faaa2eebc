package redisstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestLeaseIdleCheckLate checks that an idle check that runs late, after
// the process got no CPU for a while, keeps the lease's tokens for the
// requests held up as long (they come in once it runs), and gives them
// back at the next check when no request came by then.
func TestLeaseIdleCheckLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		// stall is how far the store's clock ran ahead of the timers: a
		// process that got no CPU for that long.
		var stall atomic.Int64
		ls := newTokenLeases(8, func() int64 { return int64(time.Since(epoch)) + stall.Load() })
		var mu sync.Mutex
		var back []leaseReturn
		ls.giveBack = func(b []leaseReturn) {
			mu.Lock()
			back = append(back, b...)
			mu.Unlock()
		}
		given := func() []leaseReturn {
			mu.Lock()
			defer mu.Unlock()
			return append([]leaseReturn(nil), back...)
		}
		p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
		keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
		take := func() bool {
			ok, claim, _ := ls.take(keys, reqs, make([]limit.Result, 1), ls.now(), make([]int64, 1), make([]int64, 1))
			if claim != nil {
				ls.release(claim)
			}
			return ok
		}
		l := ls.get("k", 0)
		l.rate = 10000 // idle after minLeaseIdle (2ms)
		ls.grant(keys, reqs, []limit.Result{{Allowed: true, Limit: 1000, Remaining: 900}},
			[]leaseGrant{{n: 51, span: time.Hour, bucket: 1}}, 0, 1)
		time.Sleep(time.Millisecond)
		if !take() {
			t.Fatal("request at 1ms: not admitted from the lease")
		}
		// The process stalls for 5ms: its idle check, set for 2ms, runs
		// when the store's clock reads 7ms.
		stall.Store(int64(5 * time.Millisecond))
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if b := given(); len(b) != 0 {
			t.Fatalf("a check 5ms late gave back %+v, want none: the requests held up come in now", b)
		}
		if !take() {
			t.Fatal("request after the stall: not admitted from the lease")
		}
		// No request after that: the next check, on time, gives back.
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		if b := given(); len(b) != 1 || b[0].n != 48 {
			t.Errorf("given back %+v after an idle time on time, want the 48 unspent once", b)
		}
	})
}
