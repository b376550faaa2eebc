package redisstore

import (
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
		given := recordGiveBacks(ls)
		p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
		keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
		take := func() bool { return takeFromLeases(ls, keys, reqs) }
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

// TestLeaseGroupGoesBack checks that when a lease's tokens go back after
// it went idle, those of the other limits of the request that last asked
// for it go back with them if no request asked for them since: a request
// takes a token of each limit or of none, so they would be spent one
// request at a time, each calling Redis for the other limit alone. A
// lease that another request used since stays.
func TestLeaseGroupGoesBack(t *testing.T) {
	tests := []struct {
		name string
		// usedAlone asks for the second limit's lease alone after the
		// request of both.
		usedAlone bool
		wantBack  map[string]int64
	}{
		{name: "both idle", wantBack: map[string]int64{"a": 49, "b": 49}},
		{name: "b used since", usedAlone: true, wantBack: map[string]int64{"a": 49}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				epoch := time.Now()
				ls := newTokenLeases(8, func() int64 { return int64(time.Since(epoch)) })
				given := recordGiveBacks(ls)
				p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
				keys := []string{"a", "b"}
				reqs := []limit.Request{{Key: "a", Params: p}, {Key: "b", Params: p}}
				take := func(n int) bool { return takeFromLeases(ls, keys[2-n:], reqs[2-n:]) }
				a, b := ls.get("a", 0), ls.get("b", 0)
				// The request of both limits claims their next tokens.
				_, claim, _ := ls.take(keys, reqs, make([]limit.Result, 2), 0, make([]int64, 2), make([]int64, 2))
				if claim == nil {
					t.Fatal("no claim on the empty leases")
				}
				// a goes idle after 2ms, b after its 20ms life.
				a.rate, b.rate = 10000, 1
				res := []limit.Result{{Allowed: true, Limit: 1000, Remaining: 900}, {Allowed: true, Limit: 1000, Remaining: 900}}
				ls.grant(keys, reqs, res, []leaseGrant{{n: 51, span: time.Hour, bucket: 1}, {n: 51, span: time.Hour, bucket: 1}}, 0, 1)
				ls.release(claim)
				if !take(2) {
					t.Fatal("request of both limits: not admitted from the leases")
				}
				if tt.usedAlone {
					time.Sleep(time.Millisecond)
					if !take(1) {
						t.Fatal("request of b alone: not admitted from its lease")
					}
				}
				time.Sleep(5 * time.Millisecond)
				synctest.Wait()
				back := map[string]int64{}
				for _, r := range given() {
					back[r.key] += r.n
				}
				if len(back) != len(tt.wantBack) {
					t.Fatalf("given back %v, want %v", back, tt.wantBack)
				}
				for k, n := range tt.wantBack {
					if back[k] != n {
						t.Errorf("given back %v, want %v", back, tt.wantBack)
					}
				}
			})
		})
	}
}
