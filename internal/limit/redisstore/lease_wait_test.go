package redisstore

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestLeaseWaitAgain checks that requests waiting for another request's
// lease wait again, when they wake to find its tokens spent and the next
// lease asked for meanwhile, rather than call Redis each for itself; and
// that near the limit (a contested lease) they do not: there every
// request is a call.
func TestLeaseWaitAgain(t *testing.T) {
	tests := []struct {
		name string
		room int64 // Redis's Remaining in the first answer
		// wantWaiting is whether the second woken request waits for
		// the first's call instead of returning without a claim.
		wantWaiting bool
	}{
		{name: "room: waits for the next lease", room: 900, wantWaiting: true},
		{name: "contested: calls", room: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				epoch := time.Now()
				ls := newTokenLeases(8, func() int64 { return int64(time.Since(epoch)) })
				p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
				keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
				ls.get("k", 0)
				// Request A finds the lease empty and claims it: its call
				// is on its way.
				ok, claimA, wait := ls.take(keys, reqs, make([]limit.Result, 1), 0, make([]int64, 1), make([]int64, 1))
				if ok || claimA == nil || wait != nil {
					t.Fatalf("first request: got %v %v %v, want a claim", ok, claimA != nil, wait != nil)
				}
				type outcome struct {
					ok    bool
					claim *leaseClaim
				}
				outs := make(chan outcome, 2)
				for range 2 {
					go func() {
						start := ls.now()
						ok, claim, err := ls.takeWaiting(context.Background(), keys, reqs, make([]limit.Result, 1), &start, make([]int64, 1), make([]int64, 1))
						if err != nil {
							t.Error(err)
						}
						outs <- outcome{ok, claim}
					}()
				}
				synctest.Wait()
				if len(outs) != 0 {
					t.Fatalf("%d requests did not wait for the claimed lease", len(outs))
				}
				// A's answer leases nothing beyond A's own request.
				res := []limit.Result{{Allowed: true, Limit: 1000, Remaining: tt.room}}
				ls.grant(keys, reqs, res, []leaseGrant{{n: 1, span: time.Hour, bucket: 1}}, 0, 1)
				ls.unspent(keys, reqs, res, 0)
				ls.release(claimA)
				synctest.Wait()
				// One woken request claims the next lease; the other waits
				// for its answer, or (contested) calls for itself.
				first := <-outs
				if first.ok || first.claim == nil {
					t.Fatalf("first woken request: got ok %v, claim %v; want a claim", first.ok, first.claim != nil)
				}
				if waiting := len(outs) == 0; waiting != tt.wantWaiting {
					t.Fatalf("second woken request waits for the first's call: %v, want %v", waiting, tt.wantWaiting)
				}
				if !tt.wantWaiting {
					if second := <-outs; second.ok || second.claim != nil {
						t.Errorf("second woken request: got ok %v, claim %v; want neither (a call of its own)", second.ok, second.claim != nil)
					}
					ls.release(first.claim)
					return
				}
				// The next lease: 5 tokens beyond the request that asked.
				res[0].Remaining = 850
				ls.grant(keys, reqs, res, []leaseGrant{{n: 6, span: time.Hour, bucket: 1}}, ls.now(), 1)
				ls.release(first.claim)
				synctest.Wait()
				if second := <-outs; !second.ok || second.claim != nil {
					t.Errorf("second woken request: got ok %v, claim %v; want admitted from the next lease", second.ok, second.claim != nil)
				}
				// Three requests, each counted once in the key's rate,
				// however often they took.
				if l := ls.m["k"]; l.seen != 3 {
					t.Errorf("requests seen: %d, want 3", l.seen)
				}
			})
		})
	}
}
