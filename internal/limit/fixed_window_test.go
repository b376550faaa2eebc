package limit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func fwParams(limit int64, window time.Duration) *Params {
	return &Params{Algorithm: "fixed_window", Limit: limit, Window: window}
}

func TestFixedWindowSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	sinceEpoch := func(d time.Duration) time.Duration { return d - time.Duration(t0.UnixNano()) }
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			name: "3 per second",
			p:    fwParams(3, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: sec},
				{at: 0, allow: true, remaining: 1, reset: sec},
				{at: 500 * ms, allow: true, remaining: 0, reset: 500 * ms},
				{at: 999 * ms, retryAfter: ms, reset: ms},
				{at: sec - 1, retryAfter: 1, reset: 1},
				// The next window forgets everything.
				{at: sec, allow: true, remaining: 2, reset: sec},
				{at: sec, allow: true, remaining: 1, reset: sec},
				{at: sec + 1, allow: true, remaining: 0, reset: sec - 1},
				{at: 1500 * ms, retryAfter: 500 * ms, reset: 500 * ms},
				{at: 5250 * ms, allow: true, remaining: 2, reset: 750 * ms},
			},
		},
		{
			// The boundary problem of fixed windows: the limit just before a boundary and
			// again just after it, 2× the limit within a nanosecond.
			name: "twice the limit across a boundary",
			p:    fwParams(3, sec),
			steps: []step{
				{at: sec - 1, allow: true, remaining: 2, reset: 1},
				{at: sec - 1, allow: true, remaining: 1, reset: 1},
				{at: sec - 1, allow: true, remaining: 0, reset: 1},
				{at: sec, allow: true, remaining: 2, reset: sec},
				{at: sec, allow: true, remaining: 1, reset: sec},
				{at: sec, allow: true, remaining: 0, reset: sec},
				{at: sec, retryAfter: sec, reset: sec},
			},
		},
		{
			// t0 is 1s past a multiple of 7s since the epoch: windows
			// are aligned to the epoch, not to the first request.
			name: "windows aligned to the epoch",
			p:    fwParams(2, 7*sec),
			steps: []step{
				{at: 0, allow: true, remaining: 1, reset: 6 * sec},
				{at: 5 * sec, allow: true, remaining: 0, reset: sec},
				{at: 6*sec - 1, retryAfter: 1, reset: 1},
				{at: 6 * sec, allow: true, remaining: 1, reset: 7 * sec},
			},
		},
		{
			name:  "limit 0 blocks",
			p:     fwParams(0, sec),
			steps: []step{{at: 0, retryAfter: sec, reset: sec}, {at: 5 * sec, retryAfter: sec, reset: sec}},
		},
		{
			name:  "unlimited",
			p:     fwParams(Unlimited, sec),
			steps: []step{{at: 0, allow: true, remaining: -1}, {at: 0, allow: true, remaining: -1}},
		},
		{
			name: "limit change keeps the count",
			p:    fwParams(3, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: sec},
				{at: 0, allow: true, remaining: 1, reset: sec},
				{at: 100 * ms, params: fwParams(2, sec), retryAfter: 900 * ms, reset: 900 * ms},
				{at: 100 * ms, params: fwParams(5, sec), allow: true, remaining: 2, reset: 900 * ms},
			},
		},
		{
			name: "time going backwards counts in the newest window",
			p:    fwParams(3, sec),
			steps: []step{
				{at: 2 * sec, allow: true, remaining: 2, reset: sec},
				{at: 1500 * ms, allow: true, remaining: 1, reset: 1500 * ms},
				{at: 2500 * ms, allow: true, remaining: 0, reset: 500 * ms},
				{at: sec, retryAfter: 2 * sec, reset: 2 * sec},
				{at: 3 * sec, allow: true, remaining: 2, reset: sec},
			},
		},
		{
			name: "before 1970",
			p:    fwParams(1, sec),
			steps: []step{
				{at: sinceEpoch(-1500 * ms), allow: true, remaining: 0, reset: 500 * ms},
				{at: sinceEpoch(-1200 * ms), retryAfter: 200 * ms, reset: 200 * ms},
				{at: sinceEpoch(-1 * sec), allow: true, remaining: 0, reset: sec},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stepAlg(t, tt.p, tt.steps)
		})
	}
}

// TestFixedWindowGuarantee is the guarantee in docs/algorithms.md, "Algorithms"
// table: never more than
// Limit admitted in one aligned window, and never more than 2×Limit in
// any interval of length Window (the boundary burst it is documented to
// allow); and a request is denied only when its window is full.
func TestFixedWindowGuarantee(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for c := range 250 {
		p := randomBucketParams(rng, "fixed_window")
		start := t0.UnixNano() + rng.Int64N(int64(p.Window))
		arrivals := arrivals(rng, p, start, time.Nanosecond)
		t.Run(fmt.Sprintf("%d/limit=%d,window=%v", c, p.Limit, p.Window), func(t *testing.T) {
			log, admitted := offer(t, p, arrivals, true)
			w := int64(p.Window)
			per := map[int64]int64{}
			for _, a := range admitted {
				per[floorDiv(a, w)]++
			}
			for k, n := range per {
				if n > p.Limit {
					t.Errorf("%d admitted in the window starting at %d, want at most %d", n, k*w, p.Limit)
				}
			}
			for _, d := range log {
				if !d.allowed && per[floorDiv(d.at, w)] < p.Limit {
					t.Errorf("denied at %d while its window admitted only %d of %d", d.at, per[floorDiv(d.at, w)], p.Limit)
					break
				}
			}
			if most, at := maxInWindow(admitted, w); most > int(2*p.Limit) {
				t.Errorf("%d admitted in [%d, %d+%v], want at most 2×%d", most, at, at, p.Window, p.Limit)
			}
		})
	}
}

// TestFixedWindowBoundaryBurst shows the documented weakness: Limit just
// before a boundary and Limit on it are all admitted, 2×Limit within 1ns.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100 {
		p := randomBucketParams(rng, "fixed_window")
		w := int64(p.Window)
		edge := (floorDiv(t0.UnixNano(), w) + 1 + rng.Int64N(100)) * w
		st := newState(t, p)
		var admitted []int64
		for _, at := range []int64{edge - 1, edge} {
			for range p.Limit + 1 {
				if st.Decide(at, p, 1).Allowed {
					st.Commit(at, p, 1)
					admitted = append(admitted, at)
				}
			}
		}
		if most, _ := maxInWindow(admitted, 1); most != int(2*p.Limit) {
			t.Errorf("limit %d, window %v: %d admitted within 1ns of the boundary at %d, want 2×%d",
				p.Limit, p.Window, most, edge, p.Limit)
		}
	}
}
