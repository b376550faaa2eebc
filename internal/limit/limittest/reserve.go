package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Reserve checks reservations (Request.Wait) on a store, for every
// algorithm, against an oracle: a fresh memory store that sees each
// admitted request arrive, without waiting, at the instant it was
// reserved for. Twelve requests arrive at once at a limit of 2 per
// second that lets them wait 6 s: every one is admitted, in the order of
// arrival (delays never decrease), at most 6 s ahead; the oracle admits
// each at its instant, and refuses it a millisecond earlier (each is the
// earliest it could be after the one before); a thirteenth that can wait 1 s, and one that
// cannot wait, are refused and count nothing, the latter told to come
// back no sooner than the queue's end, and that the limit is full again
// no sooner than that, as a read of the limit says too; and after the clock moves on a
// reservation's delay runs from the new now.
//
// newStore returns a fresh store and a function that sets the instant
// it decides at (a store that decides at the now it is given can ignore
// it).
func Reserve(t *testing.T, newStore func(t *testing.T, now time.Time) (limit.Store, func(time.Time))) {
	t.Helper()
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			p := limit.Params{Algorithm: alg, Limit: 2, Window: time.Second}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			now := T0
			s, setNow := newStore(t, now)
			key := "app|/reserve|" + alg
			ask := func(at time.Time, wait time.Duration) (bool, limit.Result) {
				t.Helper()
				setNow(at)
				res := make([]limit.Result, 1)
				ok, err := s.Allow(context.Background(), at, []limit.Request{{Key: key, Params: &p, Wait: wait}}, res)
				if err != nil {
					t.Fatalf("Allow: %v", err)
				}
				return ok, res[0]
			}
			var at []time.Time
			var last time.Duration
			for i := range 12 {
				ok, r := ask(now, 6*time.Second)
				if !ok || r.Delay < last || r.Delay > 6*time.Second {
					t.Fatalf("request %d of 12 at once: got %v %+v, want admitted within 6s, no sooner than the one before (%v)", i+1, ok, r, last)
				}
				last = r.Delay
				at = append(at, now.Add(r.Delay))
			}
			if last < 4*time.Second {
				t.Fatalf("the twelfth of 12 at 2 per second waits %v, want at least 4s", last)
			}
			if ok, r := ask(now, time.Second); ok {
				t.Fatalf("a thirteenth that can wait 1s: admitted %+v, want refused", r)
			}
			setNow(now)
			read := make([]limit.Result, 1)
			if _, err := s.Allow(context.Background(), now, []limit.Request{{Key: key, Params: &p, Act: limit.Read}}, read); err != nil {
				t.Fatalf("Allow: %v", err)
			}
			if r := read[0]; r.Reset < last || (!r.Allowed && r.RetryAfter < last) {
				t.Fatalf("a read behind a queue of %v: got %+v, want Reset (and, for no room, RetryAfter) no sooner than the queue's end", last, r)
			}
			if ok, r := ask(now, 0); ok || r.RetryAfter < last || r.Reset < r.RetryAfter {
				t.Fatalf("a request that cannot wait, behind a queue of %v: got %v %+v, want refused with RetryAfter ≥ the queue's end, and Reset (the limit full again) no sooner", last, ok, r)
			}
			// The oracle: each reservation is a request arriving at its
			// instant, and none could have been sooner.
			for k := range at {
				o, err := limit.NewMemory(limit.MemoryConfig{})
				if err != nil {
					t.Fatal(err)
				}
				for j := range k {
					if ok, _ := allowAt(t, o, at[j], key, &p); !ok {
						t.Fatalf("oracle: request %d at +%v refused", j+1, at[j].Sub(now))
					}
				}
				if sooner := at[k].Add(-time.Millisecond); at[k].After(now) && (k == 0 || !sooner.Before(at[k-1])) {
					if ok, _ := allowAt(t, o, sooner, key, &p); ok {
						t.Fatalf("request %d reserved at +%v had room a millisecond sooner", k+1, at[k].Sub(now))
					}
				}
				if ok, r := allowAt(t, o, at[k], key, &p); !ok {
					t.Fatalf("oracle: request %d reserved at +%v has no room there: %+v", k+1, at[k].Sub(now), r)
				}
			}
			// Later, the queue's end is nearer.
			later := now.Add(2 * time.Second)
			ok, r := ask(later, 6*time.Second)
			if want := at[11].Sub(later); !ok || r.Delay < want {
				t.Fatalf("a request 2s later: got %v %+v, want admitted with a delay of at least %v", ok, r, want)
			}
		})
	}
}

// allowAt decides one request of key at now on s.
func allowAt(t *testing.T, s limit.Store, now time.Time, key string, p *limit.Params) (bool, limit.Result) {
	t.Helper()
	res := make([]limit.Result, 1)
	ok, err := s.Allow(context.Background(), now, []limit.Request{{Key: key, Params: p}}, res)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return ok, res[0]
}
