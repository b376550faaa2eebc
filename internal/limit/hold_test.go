package limit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestHoldRelease checks Request.Hold and Release on both stores, for
// every algorithm: holds take room without being counted, no more are
// admitted than the room, a release gives it back, a charge counts, and
// a denial only for the units held starts no lockout and asks a short
// wait.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	var srv *redistest.Server
	if !testing.Short() {
		srv = redistest.Start(t)
	}
	for _, store := range []string{"memory", "redis"} {
		for _, alg := range Algorithms() {
			t.Run(store+"/"+alg, func(t *testing.T) {
				t.Parallel()
				p := Params{Algorithm: alg, Limit: 3, Window: time.Hour, Lock: time.Hour}
				if alg == "sliding_window" {
					p.Precision = 10
				}
				var s Store
				now := time.Unix(1_735_689_600, 0)
				switch store {
				case "memory":
					s = newTestMemory(t, MemoryConfig{})
				case "redis":
					if srv == nil {
						t.Skip("-short: no Redis")
					}
					r, c := newFixedRedis(t, srv)
					c.us.Store(now.UnixMicro())
					s = r
				}
				key := "app|/login|" + alg
				do := func(q Request) (bool, Result) {
					t.Helper()
					q.Key, q.Params = key, &p
					res := make([]Result, 1)
					ok, err := s.Allow(context.Background(), now, []Request{q}, res)
					if err != nil {
						t.Fatalf("Allow(%+v): %v", q, err)
					}
					return ok, res[0]
				}
				for i := range 3 {
					if ok, r := do(Request{Hold: true}); !ok || r.Remaining != int64(2-i) {
						t.Fatalf("hold %d: got %v %+v, want admitted with %d left", i+1, ok, r, 2-i)
					}
				}
				ok, r := do(Request{Hold: true})
				if ok || r.RetryAfter <= 0 || r.RetryAfter > HeldRetryAfter {
					t.Fatalf("hold 4: got %v %+v, want denied, retry within %v", ok, r, HeldRetryAfter)
				}
				// No lockout: a release makes room at once.
				do(Request{Release: true})
				if ok, r := do(Request{Hold: true}); !ok {
					t.Fatalf("hold after a release: denied %+v", r)
				}
				// Two held ones are answered as counted: charge, then
				// release, in two calls and in one.
				do(Request{Charge: true})
				do(Request{Release: true})
				both := []Request{{Key: key, Params: &p, Charge: true}, {Key: key, Params: &p, Release: true}}
				if _, err := s.Allow(context.Background(), now, both, make([]Result, 2)); err != nil {
					t.Fatalf("charge and release in one call: %v", err)
				}
				// Counted 2, held 1: no room.
				if ok, r := do(Request{Hold: true}); ok {
					t.Fatalf("hold with 2 counted and 1 held: admitted %+v", r)
				}
				do(Request{Release: true})
				if ok, r := do(Request{Hold: true}); !ok || r.Remaining != 0 {
					t.Fatalf("hold with 2 counted and none held: got %v %+v, want admitted with 0 left", ok, r)
				}
				do(Request{Charge: true})
				do(Request{Release: true})
				// Counted 3: a denial that starts the lockout.
				if ok, r := do(Request{Hold: true}); ok || r.RetryAfter < time.Hour-time.Second {
					t.Fatalf("hold on a spent limit: got %v %+v, want denied for the lockout", ok, r)
				}
			})
		}
	}
}
