package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// HoldRelease checks the Hold and Release acts on a store, for every
// algorithm: holds take room without being counted, no more are admitted
// than the room, a release gives it back, a charge counts, and a denial
// only for the units held starts no lockout and asks a short wait; a read
// says the units held.
// newStore returns a fresh store that decides at now.
func HoldRelease(t *testing.T, newStore func(t *testing.T, now time.Time) limit.Store) {
	t.Helper()
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			p := limit.Params{Algorithm: alg, Limit: 3, Window: time.Hour, Lock: time.Hour}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			now := time.Unix(1_735_689_600, 0)
			s := newStore(t, now)
			key := "app|/login|" + alg
			do := func(q limit.Request) (bool, limit.Result) {
				t.Helper()
				q.Key, q.Params = key, &p
				res := make([]limit.Result, 1)
				ok, err := s.Allow(context.Background(), now, []limit.Request{q}, res)
				if err != nil {
					t.Fatalf("Allow(%+v): %v", q, err)
				}
				return ok, res[0]
			}
			for i := range 3 {
				if ok, r := do(limit.Request{Act: limit.Hold}); !ok || r.Remaining != int64(2-i) {
					t.Fatalf("hold %d: got %v %+v, want admitted with %d left", i+1, ok, r, 2-i)
				}
			}
			ok, r := do(limit.Request{Act: limit.Hold})
			if ok || r.RetryAfter <= 0 || r.RetryAfter > limit.HeldRetryAfter {
				t.Fatalf("hold 4: got %v %+v, want denied, retry within %v", ok, r, limit.HeldRetryAfter)
			}
			// A read says the units held (what /usage shows), beside
			// a Remaining that leaves them out, and holds nothing.
			if _, r := do(limit.Request{Act: limit.Read}); r.Remaining != 3 || r.Held != 3 {
				t.Fatalf("read with 3 held: %+v, want 3 left and 3 held", r)
			}
			// No lockout: a release makes room at once.
			do(limit.Request{Act: limit.Release})
			for range 2 {
				if _, r := do(limit.Request{Act: limit.Read}); r.Remaining != 3 || r.Held != 2 {
					t.Fatalf("read with 2 held: %+v, want 3 left and 2 held", r)
				}
			}
			if ok, r := do(limit.Request{Act: limit.Hold}); !ok {
				t.Fatalf("hold after a release: denied %+v", r)
			}
			// Two held ones are answered as counted: charge, then
			// release, in two calls and in one.
			do(limit.Request{Act: limit.Charge})
			do(limit.Request{Act: limit.Release})
			both := []limit.Request{{Key: key, Params: &p, Act: limit.Charge}, {Key: key, Params: &p, Act: limit.Release}}
			if _, err := s.Allow(context.Background(), now, both, make([]limit.Result, 2)); err != nil {
				t.Fatalf("charge and release in one call: %v", err)
			}
			// Counted 2, held 1: no room.
			if ok, r := do(limit.Request{Act: limit.Hold}); ok {
				t.Fatalf("hold with 2 counted and 1 held: admitted %+v", r)
			}
			if _, r := do(limit.Request{Act: limit.Read}); r.Remaining != 1 || r.Held != 1 {
				t.Fatalf("read with 2 counted and 1 held: %+v, want 1 left and 1 held", r)
			}
			do(limit.Request{Act: limit.Release})
			if ok, r := do(limit.Request{Act: limit.Hold}); !ok || r.Remaining != 0 {
				t.Fatalf("hold with 2 counted and none held: got %v %+v, want admitted with 0 left", ok, r)
			}
			do(limit.Request{Act: limit.Charge})
			do(limit.Request{Act: limit.Release})
			// Counted 3: a denial that starts the lockout.
			if ok, r := do(limit.Request{Act: limit.Hold}); ok || r.RetryAfter < time.Hour-time.Second {
				t.Fatalf("hold on a spent limit: got %v %+v, want denied for the lockout", ok, r)
			}
		})
	}
}
