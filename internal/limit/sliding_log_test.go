package limit

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func slParams(limit int64, window time.Duration) *Params {
	return &Params{Algorithm: "sliding_log", Limit: limit, Window: window}
}

func TestSlidingLogSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			// An admission at a counts in [a, a+1s]: it stops counting at
			// a+1s+1ns.
			name: "3 per second",
			p:    slParams(3, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: sec + 1},
				{at: 100 * ms, allow: true, remaining: 1, reset: sec + 1},
				{at: 200 * ms, allow: true, remaining: 0, reset: sec + 1},
				{at: 300 * ms, retryAfter: 700*ms + 1, reset: 900*ms + 1},
				// [t0, t0+1s] is closed: the request at t0 still counts.
				{at: sec, retryAfter: 1, reset: 200*ms + 1},
				{at: sec + 1, allow: true, remaining: 0, reset: sec + 1},
				{at: sec + 1, retryAfter: 100 * ms, reset: sec + 1},
				{at: 1100*ms + 1, allow: true, remaining: 0, reset: sec + 1},
			},
		},
		{
			name: "limit change keeps the log",
			p:    slParams(2, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 1, reset: sec + 1},
				{at: 0, allow: true, remaining: 0, reset: sec + 1},
				{at: 0, retryAfter: sec + 1, reset: sec + 1},
				// A higher limit grows the log.
				{at: 100 * ms, params: slParams(4, sec), allow: true, remaining: 1, reset: sec + 1},
				{at: 100 * ms, params: slParams(4, sec), allow: true, remaining: 0, reset: sec + 1},
				{at: 100 * ms, params: slParams(4, sec), retryAfter: 900*ms + 1, reset: sec + 1},
				// A lower one looks at the newest admissions only.
				{at: 100 * ms, params: slParams(1, sec), retryAfter: sec + 1, reset: sec + 1},
				{at: 1050 * ms, params: slParams(3, sec), allow: true, remaining: 0, reset: sec + 1},
			},
		},
		{
			name: "time going backwards counts at the newest admission",
			p:    slParams(3, sec),
			steps: []step{
				{at: sec, allow: true, remaining: 2, reset: sec + 1},
				{at: 500 * ms, allow: true, remaining: 1, reset: 1500*ms + 1},
				{at: 999 * ms, allow: true, remaining: 0, reset: 1001*ms + 1},
				{at: 400 * ms, retryAfter: 1600*ms + 1, reset: 1600*ms + 1},
				{at: 2*sec + 1, allow: true, remaining: 2, reset: sec + 1},
			},
		},
		{
			name: "long gap",
			p:    slParams(2, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 1, reset: sec + 1},
				{at: 0, allow: true, remaining: 0, reset: sec + 1},
				{at: 1000 * time.Hour, allow: true, remaining: 1, reset: sec + 1},
				{at: 1000 * time.Hour, allow: true, remaining: 0, reset: sec + 1},
				{at: 1000 * time.Hour, retryAfter: sec + 1, reset: sec + 1},
			},
		},
		{
			name:  "limit 0 blocks",
			p:     slParams(0, sec),
			steps: []step{{at: 0, retryAfter: sec, reset: sec}},
		},
		{
			name:  "unlimited",
			p:     slParams(Unlimited, sec),
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

// TestSlidingLogExact is the guarantee in docs/algorithms.md, "Algorithms"
// table: never more than
// Limit admissions in any closed interval of length Window — and, for
// "exactly", a request is denied only when the interval of length Window
// that ends at it already holds Limit.
func TestSlidingLogExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	for c := range 250 {
		p := randomBucketParams(rng, "sliding_log")
		start := t0.UnixNano() + rng.Int64N(int64(p.Window))
		arrivals := arrivals(rng, p, start, time.Nanosecond)
		t.Run(fmt.Sprintf("%d/limit=%d,window=%v", c, p.Limit, p.Window), func(t *testing.T) {
			log, admitted := offer(t, p, arrivals, true)
			w := int64(p.Window)
			if most, at := maxInWindow(admitted, w); most > int(p.Limit) {
				t.Errorf("%d admitted in [%d, %d+%v], want at most %d", most, at, at, p.Window, p.Limit)
			}
			var before []int64 // admitted before the decision, sorted
			for _, d := range log {
				if d.allowed {
					before = append(before, d.at)
					continue
				}
				from := sort.Search(len(before), func(i int) bool { return before[i] >= d.at-w })
				if n := len(before) - from; n != int(p.Limit) {
					t.Errorf("denied at %d with %d admitted in [%d-%v, %d], want %d", d.at, n, d.at, p.Window, d.at, p.Limit)
					break
				}
			}
		})
	}
}
