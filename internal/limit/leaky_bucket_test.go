package limit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func lbParams(limit int64, window time.Duration, burst int64) *Params {
	return &Params{Algorithm: "leaky_bucket", Limit: limit, Window: window, Burst: burst}
}

func TestLeakyBucketSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			// Capacity 2, leaking one every 500ms.
			name: "capacity 2 at 2 per second",
			p:    lbParams(2, sec, 0),
			steps: []step{
				{at: 0, allow: true, remaining: 1, reset: 500 * ms},
				{at: 0, allow: true, remaining: 0, reset: sec},
				{at: 0, retryAfter: 500 * ms, reset: sec},
				{at: 250 * ms, retryAfter: 250 * ms, reset: 750 * ms},
				{at: 500 * ms, allow: true, remaining: 0, reset: sec},
				{at: 3 * sec, allow: true, remaining: 1, reset: 500 * ms},
			},
		},
		{
			// Level 1.5 of 3 at 750ms: one more fits, then none.
			name: "capacity 3 at 2 per second",
			p:    lbParams(2, sec, 3),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: 500 * ms},
				{at: 0, allow: true, remaining: 1, reset: sec},
				{at: 0, allow: true, remaining: 0, reset: 1500 * ms},
				{at: 0, retryAfter: 500 * ms, reset: 1500 * ms},
				{at: 750 * ms, allow: true, remaining: 0, reset: 1250 * ms},
				{at: 750 * ms, retryAfter: 250 * ms, reset: 1250 * ms},
			},
		},
		{
			name: "capacity 1 is a steady pace",
			p:    lbParams(3, sec, 1),
			steps: []step{
				// Empty at 1/3 s.
				{at: 0, allow: true, remaining: 0, reset: 333333334},
				{at: 333333333, retryAfter: 1, reset: 1},
				// Admitted 2/3 ns late: empty at 666666667⅓ns.
				{at: 333333334, allow: true, remaining: 0, reset: 333333334},
				{at: 666666667, retryAfter: 1, reset: 1},
				{at: 666666668, allow: true, remaining: 0, reset: 333333334},
				{at: sec, retryAfter: 2, reset: 2},
			},
		},
		{
			name:  "limit 0 blocks",
			p:     lbParams(0, sec, 0),
			steps: []step{{at: 0, retryAfter: sec, reset: sec}},
		},
		{
			name:  "unlimited",
			p:     lbParams(Unlimited, sec, 0),
			steps: []step{{at: 0, allow: true, remaining: -1}, {at: 0, allow: true, remaining: -1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stepAlg(t, tt.p, tt.steps)
		})
	}
}

// TestLeakyBucketGuarantee is the guarantee in docs/algorithms.md, "Algorithms"
// table: never more than
// capacity + rate·t admitted in any interval of length t. Every decision
// is also exactly that of a textbook leaky bucket in exact arithmetic, and
// that of a token bucket of the same capacity and rate.
func TestLeakyBucketGuarantee(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(15, 16))
	for c := range 300 {
		p := randomBucketParams(rng, "leaky_bucket")
		start := t0.UnixNano() + rng.Int64N(int64(p.Window))
		arrivals := arrivals(rng, p, start, time.Nanosecond)
		t.Run(fmt.Sprintf("%d/limit=%d,window=%v,burst=%d", c, p.Limit, p.Window, p.Burst), func(t *testing.T) {
			log, admitted := offer(t, p, arrivals, true)
			if err := rateBound(admitted, capacity(p), p); err != nil {
				t.Error(err)
			}
			if err := refBucket(log, p, true); err != nil {
				t.Error(err)
			}
			tb := *p
			tb.Algorithm = "token_bucket"
			st := newState(t, &tb)
			for i, d := range log {
				if got := st.Decide(d.at, &tb, 1).Allowed; got != d.allowed {
					t.Fatalf("decision %d at %d: token bucket allowed %v, leaky bucket %v", i, d.at, got, d.allowed)
				}
				if d.allowed {
					st.Commit(d.at, &tb, 1)
				}
			}
			if !slices.IsSorted(admitted) {
				t.Errorf("admissions out of order")
			}
		})
	}
}
