package redisstore

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestLeaseLife checks that a lease's tokens go back to Redis LeaseIdle
// after their grant even while the key is busy: a request every 2ms
// keeps the key from going idle, yet what the requests did not spend by
// then goes back, so that a request another gateway's Redis denies never
// waits for tokens older than LeaseIdle.
func TestLeaseLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Now()
		ls := newTokenLeases(8, func() int64 { return int64(time.Since(epoch)) })
		given := recordGiveBacks(ls)
		p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
		keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
		ls.get("k", 0)
		ls.grant(keys, reqs, []limit.Result{{Allowed: true, Limit: 1000, Remaining: 900}},
			[]leaseGrant{{n: 51, span: time.Hour, bucket: 1}}, 0, 1)
		spent := 0
		for range 15 {
			time.Sleep(2 * time.Millisecond)
			synctest.Wait()
			if takeFromLeases(ls, keys, reqs) {
				spent++
			}
		}
		back := given()
		if len(back) != 1 || back[0].n+int64(spent) != 50 {
			t.Fatalf("after 30ms of a request every 2ms: given back %+v, spent %d; want the 50 - %d unspent given back once", back, spent, spent)
		}
		if spent != 9 {
			t.Errorf("spent %d before the lease's life ended at 20ms, want 9 (at 2, 4, ... 18ms)", spent)
		}
	})
}

// TestLeaseContested checks that a lease whose limit Redis last reported
// less than half full asks for no next lease when it runs low: near the
// limit every request is a call, and no token is leased that another
// gateway's request may be denied for.
func TestLeaseContested(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		room      int64 // Redis's Remaining beside the lease
		wantClaim bool
	}{
		{name: "half the room or more: the next lease", room: 500, wantClaim: true},
		{name: "less than half: no lease", room: 499},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ls := newTokenLeases(8, func() int64 { return 0 })
			p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
			keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
			ls.get("k", 0)
			ls.grant(keys, reqs, []limit.Result{{Allowed: true, Limit: 1000, Remaining: tt.room}},
				[]leaseGrant{{n: 9, span: time.Hour, bucket: 1}}, 0, 1)
			// 8 tokens: the seventh request finds 2 left, a quarter.
			var claimed bool
			for i := range 8 {
				rates := make([]int64, 1)
				ok, claim, wait := ls.take(keys, reqs, make([]limit.Result, 1), 0, rates, make([]int64, 1))
				if !ok || wait != nil {
					t.Fatalf("request %d: not admitted from the lease", i)
				}
				if claim != nil {
					claimed = true
					ls.release(claim)
				}
			}
			if claimed != tt.wantClaim {
				t.Errorf("asked for the next lease: %v, want %v", claimed, tt.wantClaim)
			}
		})
	}
}
