package limit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// t0 is the instant step tables start from. It is midnight, so it starts a
// bucket for every bucket width that divides a second.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func swParams(limit int64, window time.Duration, precision int) *Params {
	return &Params{Algorithm: "sliding_window", Limit: limit, Window: window, Precision: precision}
}

// step is one request in a step table: at t0+at, with the table's Params
// unless params is set, the decision must be the rest of the fields. An
// admitted request is counted before the next step.
type step struct {
	at         time.Duration
	params     *Params
	allow      bool
	remaining  int64
	retryAfter time.Duration
	reset      time.Duration
}

// runSteps runs steps against st and reports the step that fails.
func runSteps(t *testing.T, st State, p *Params, steps []step) {
	t.Helper()
	for i, s := range steps {
		pp := p
		if s.params != nil {
			pp = s.params
		}
		now := t0.Add(s.at).UnixNano()
		got := st.Decide(now, pp, 1)
		want := Result{Allowed: s.allow, Limit: pp.Limit, Remaining: s.remaining, RetryAfter: s.retryAfter, Reset: s.reset}
		if got != want {
			t.Errorf("step %d (t0%+v, limit %d): got %+v, want %+v", i, s.at, pp.Limit, got, want)
		}
		// A denial counts nothing: its Reset is the uncounted one.
		if u := st.UncountedReset(now, pp); !got.Allowed && u != got.Reset {
			t.Errorf("step %d (t0%+v, limit %d): uncounted reset: got %v, want the denial's %v", i, s.at, pp.Limit, u, got.Reset)
		}
		if got.Allowed {
			st.Commit(now, pp, 1)
		}
	}
}

func TestSlidingWindowSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	// sinceEpoch places a step at an absolute Unix time.
	sinceEpoch := func(d time.Duration) time.Duration { return d - time.Duration(t0.UnixNano()) }
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			// w = 500ms; the ring holds buckets b-2..b (1.5s).
			name: "3 per second in 2 buckets",
			p:    swParams(3, sec, 2),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: 1500 * ms},
				{at: 100 * ms, allow: true, remaining: 1, reset: 1400 * ms},
				{at: 200 * ms, allow: true, remaining: 0, reset: 1300 * ms},
				{at: 300 * ms, retryAfter: 1200 * ms, reset: 1200 * ms},
				{at: 600 * ms, retryAfter: 900 * ms, reset: 900 * ms},
				{at: 1500*ms - 1, retryAfter: 1, reset: 1},
				{at: 1500 * ms, allow: true, remaining: 2, reset: 1500 * ms},
				{at: 2000 * ms, allow: true, remaining: 1, reset: 1500 * ms},
				{at: 2500*ms - 1, allow: true, remaining: 0, reset: 1000*ms + 1},
				// Bucket 1500ms ages out at 3000ms, freeing one.
				{at: 2500 * ms, retryAfter: 500 * ms, reset: 1000 * ms},
				{at: 3000 * ms, allow: true, remaining: 0, reset: 1500 * ms},
				{at: 3000 * ms, retryAfter: 500 * ms, reset: 1500 * ms},
			},
		},
		{
			// w = 100ms; the ring holds 11 buckets (1.1s).
			name: "5 per second in 10 buckets",
			p:    swParams(5, sec, 10),
			steps: []step{
				{at: 0, allow: true, remaining: 4, reset: 1100 * ms},
				{at: 0, allow: true, remaining: 3, reset: 1100 * ms},
				{at: 250 * ms, allow: true, remaining: 2, reset: 1050 * ms},
				{at: 950 * ms, allow: true, remaining: 1, reset: 1050 * ms},
				{at: 999 * ms, allow: true, remaining: 0, reset: 1001 * ms},
				// [t0, t0+1s] is closed: the two requests at t0 still count.
				// Ten buckets alone would have forgotten them here.
				{at: 1000 * ms, retryAfter: 100 * ms, reset: 1000 * ms},
				{at: 1100*ms - 1, retryAfter: 1, reset: 900*ms + 1},
				{at: 1100 * ms, allow: true, remaining: 1, reset: 1100 * ms},
				{at: 1100 * ms, allow: true, remaining: 0, reset: 1100 * ms},
				// The 250ms request ages out at 1.3s.
				{at: 1100 * ms, retryAfter: 200 * ms, reset: 1100 * ms},
			},
		},
		{
			name: "limit 0 blocks",
			p:    swParams(0, sec, 10),
			steps: []step{
				{at: 0, retryAfter: sec, reset: sec},
				{at: 0, retryAfter: sec, reset: sec},
				{at: 5 * sec, retryAfter: sec, reset: sec},
			},
		},
		{
			name: "unlimited",
			p:    swParams(Unlimited, sec, 10),
			steps: []step{
				{at: 0, allow: true, remaining: -1},
				{at: 0, allow: true, remaining: -1},
				{at: 0, allow: true, remaining: -1},
			},
		},
		{
			name: "limit change keeps the counts",
			p:    swParams(5, sec, 10),
			steps: []step{
				{at: 0, allow: true, remaining: 4, reset: 1100 * ms},
				{at: 0, allow: true, remaining: 3, reset: 1100 * ms},
				{at: 0, allow: true, remaining: 2, reset: 1100 * ms},
				{at: 100 * ms, params: swParams(2, sec, 10), retryAfter: sec, reset: sec},
				{at: 100 * ms, params: swParams(10, sec, 10), allow: true, remaining: 6, reset: 1100 * ms},
				{at: 100 * ms, params: swParams(4, sec, 10), retryAfter: sec, reset: 1100 * ms},
			},
		},
		{
			name: "time going backwards counts in the newest bucket",
			p:    swParams(3, sec, 10),
			steps: []step{
				{at: sec, allow: true, remaining: 2, reset: 1100 * ms},
				{at: 500 * ms, allow: true, remaining: 1, reset: 1600 * ms},
				{at: 999 * ms, allow: true, remaining: 0, reset: 1101 * ms},
				{at: 400 * ms, retryAfter: 1700 * ms, reset: 1700 * ms},
				{at: -time.Hour, retryAfter: time.Hour + 2100*ms, reset: time.Hour + 2100*ms},
				{at: 2100*ms - 1, retryAfter: 1, reset: 1},
				{at: 2100 * ms, allow: true, remaining: 2, reset: 1100 * ms},
			},
		},
		{
			name: "before 1970",
			p:    swParams(2, sec, 10),
			steps: []step{
				{at: sinceEpoch(-5 * sec), allow: true, remaining: 1, reset: 1100 * ms},
				{at: sinceEpoch(-5*sec + 50*ms), allow: true, remaining: 0, reset: 1050 * ms},
				{at: sinceEpoch(-4500 * ms), retryAfter: 600 * ms, reset: 600 * ms},
				{at: sinceEpoch(-500 * ms), allow: true, remaining: 1, reset: 1100 * ms},
				{at: sinceEpoch(-1), allow: true, remaining: 0, reset: sec + 1},
				{at: sinceEpoch(0), retryAfter: 600 * ms, reset: sec},
			},
		},
		{
			// w = 1ms; the ring holds 1001 buckets (1.001s).
			name: "long gap",
			p:    swParams(2, sec, 1000),
			steps: []step{
				{at: 0, allow: true, remaining: 1, reset: 1001 * ms},
				{at: 0, allow: true, remaining: 0, reset: 1001 * ms},
				{at: 1000 * time.Hour, allow: true, remaining: 1, reset: 1001 * ms},
				{at: 1000 * time.Hour, allow: true, remaining: 0, reset: 1001 * ms},
				{at: 1000*time.Hour + 1001*ms - 1, retryAfter: 1, reset: 1},
				{at: 1000*time.Hour + 1001*ms, allow: true, remaining: 1, reset: 1001 * ms},
				{at: 1000*time.Hour + 1500*ms, allow: true, remaining: 0, reset: 1001 * ms},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, slidingWindow{}.NewState(tt.p), tt.p, tt.steps)
		})
	}
}

// TestSlidingWindowNewStateUnvalidated checks that Params that skipped
// validation cannot crash a state.
func TestSlidingWindowNewStateUnvalidated(t *testing.T) {
	t.Parallel()
	for _, p := range []*Params{
		swParams(1, time.Second, 0),
		swParams(1, time.Second, -1),
		swParams(1, 0, 10),
		swParams(1, -time.Second, 10),
		swParams(1, time.Nanosecond, 1_000_000),
	} {
		st := slidingWindow{}.NewState(p)
		for _, now := range []int64{0, -1, 1 << 62, -(1 << 62), 5} {
			if st.Decide(now, p, 1).Allowed {
				st.Commit(now, p, 1)
			}
			st.Idle(now, p)
		}
	}
}

// bucketWidth is the documented bucket width: ⌈Window/Precision⌉.
func bucketWidth(p *Params) int64 {
	return (int64(p.Window) + int64(p.Precision) - 1) / int64(p.Precision)
}

func randomParams(rng *rand.Rand) *Params {
	limit := 1 + rng.Int64N(50)
	precision := 1 + rng.IntN(20)
	var window time.Duration
	switch rng.IntN(3) {
	case 0:
		window = []time.Duration{time.Second, 100 * time.Millisecond, time.Minute, 3 * time.Second}[rng.IntN(4)]
	case 1:
		// Not a multiple of the precision, most of the time.
		window = time.Duration(1_000_000 + rng.Int64N(5_000_000_000))
	default:
		// Tiny buckets: a few µs each.
		window = time.Duration(precision) * time.Duration(1000+rng.Int64N(5000))
	}
	return swParams(limit, window, precision)
}

// feed offers arrivals (sorted) to a fresh state in order and returns the
// admitted instants. Arrivals at exactly Window after an admission are
// added on the fly, since the interval [a, a+Window] is closed. On every
// decision it checks that RetryAfter and Reset are exact.
func feed(t *testing.T, p *Params, arrivals []int64) []int64 {
	t.Helper()
	st := slidingWindow{}.NewState(p)
	win, w := int64(p.Window), bucketWidth(p)
	end := arrivals[len(arrivals)-1]
	var admitted, echoes []int64 // echoes are nondecreasing: admissions are
	failures := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if failures++; failures <= 5 {
			t.Errorf(format, args...)
		}
	}
	for i := 0; i < len(arrivals) || len(echoes) > 0; {
		var now int64
		if len(echoes) > 0 && (i == len(arrivals) || echoes[0] < arrivals[i]) {
			now, echoes = echoes[0], echoes[1:]
		} else {
			now = arrivals[i]
			i++
		}
		r := st.Decide(now, p, 1)
		if r.Remaining < 0 || r.Remaining >= p.Limit {
			fail("at %d: remaining %d outside 0..%d", now, r.Remaining, p.Limit-1)
		}
		if !r.Allowed {
			// Retry-After honesty: admitted exactly RetryAfter later, not
			// 1ns sooner (nothing else happens in between).
			if r.RetryAfter <= 0 || int64(r.RetryAfter) > int64(p.Precision+1)*w {
				fail("at %d: retry after %v outside (0, (precision+1)·bucket]", now, r.RetryAfter)
				continue
			}
			if !st.Decide(now+int64(r.RetryAfter), p, 1).Allowed {
				fail("at %d: denied after waiting retry after %v", now, r.RetryAfter)
			}
			if st.Decide(now+int64(r.RetryAfter)-1, p, 1).Allowed {
				fail("at %d: admitted 1ns before retry after %v", now, r.RetryAfter)
			}
			continue
		}
		st.Commit(now, p, 1)
		admitted = append(admitted, now)
		if now+win <= end && len(admitted)%2 == 0 {
			echoes = append(echoes, now+win)
		}
		// Reset honesty: every count has aged out exactly at Reset.
		if st.Idle(now+int64(r.Reset)-1, p) || !st.Idle(now+int64(r.Reset), p) {
			fail("at %d: reset %v is not when the state becomes idle", now, r.Reset)
		}
	}
	return admitted
}

// maxInWindow returns the largest number of admissions (sorted) in a closed
// interval [s, s+window], and the s where it occurs. It suffices to try
// each admission as s.
func maxInWindow(admitted []int64, window int64) (most int, at int64) {
	j := 0
	for i, s := range admitted {
		for j < len(admitted) && admitted[j] <= s+window {
			j++
		}
		if j-i > most {
			most, at = j-i, s
		}
	}
	return most, at
}

// TestSlidingWindowNeverExceedsLimit is the guarantee in docs/algorithms.md,
// "Algorithms" table: never
// more than Limit admissions in any closed interval of length Window, under
// bursts placed on bucket and window edges and random arrivals.
func TestSlidingWindowNeverExceedsLimit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for c := range 300 {
		p := randomParams(rng)
		start := t0.UnixNano() + rng.Int64N(int64(p.Window))
		arrivals := arrivals(rng, p, start, time.Nanosecond)
		name := fmt.Sprintf("%d/limit=%d,precision=%d,window=%v", c, p.Limit, p.Precision, p.Window)
		t.Run(name, func(t *testing.T) {
			admitted := feed(t, p, arrivals)
			if most, at := maxInWindow(admitted, int64(p.Window)); most > int(p.Limit) {
				t.Errorf("%d admitted in [%d, %d+%v], want at most %d", most, at, at, p.Window, p.Limit)
			}
			if len(admitted) < int(p.Limit) {
				t.Errorf("%d admitted in 6 windows of %d arrivals, want at least %d", len(admitted), len(arrivals), p.Limit)
			}
		})
	}
}

// TestSlidingWindowSteadyStream checks what a steady stream at twice the
// limit gets.
//
// The "Algorithms" table of docs/algorithms.md promises Limit·P/(P+1) per window. That holds as a long-run
// rate (Limit per P+1 buckets, i.e. per Window+w), not in every aligned
// window: admissions clump at the start of each (P+1)-bucket cycle, and a
// window that misses a full bucket of that clump gets less. For example
// limit 10, precision 10, window 1s and 20 evenly spaced requests a second
// get 8 in some windows, not floor(10·10/11) = 9. What the ring does
// guarantee, with arrivals every s, and tested here:
//
//   - every half-open interval of length (P+1)·w + s holds at least Limit
//     admissions (proof: take the last denial in it; the P+1 buckets it
//     saw held Limit, none of them older than the interval's start less
//     the admitted arrivals after that denial);
//   - hence every aligned window holds at most Limit and, by the same
//     argument, at least Limit - 1 - ⌈((P+1)·w - Window)/s⌉.
func TestSlidingWindowSteadyStream(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	const windows = 12
	for c := range 200 {
		p := randomParams(rng)
		name := fmt.Sprintf("%d/limit=%d,precision=%d,window=%v", c, p.Limit, p.Precision, p.Window)
		t.Run(name, func(t *testing.T) {
			win, w := int64(p.Window), bucketWidth(p)
			s := win / (2 * p.Limit) // twice the limit
			start := t0.UnixNano() + rng.Int64N(win)
			end := start + windows*win
			st := slidingWindow{}.NewState(p)
			var arrivals, admitted []int64
			for now := start; now < end; now += s {
				arrivals = append(arrivals, now)
				if st.Decide(now, p, 1).Allowed {
					st.Commit(now, p, 1)
					admitted = append(admitted, now)
				}
			}

			cycle := int64(p.Precision+1)*w + s
			j, k := 0, 0 // admitted[j:k] are in [T, T+cycle)
			for _, T := range arrivals {
				if T+cycle > end {
					break
				}
				for j < len(admitted) && admitted[j] < T {
					j++
				}
				for k < len(admitted) && admitted[k] < T+cycle {
					k++
				}
				if got := k - j; got < int(p.Limit) {
					t.Fatalf("%d admitted in [%d, %d+%dns), want at least %d", got, T, T, cycle, p.Limit)
				}
			}

			delta := int64(p.Precision+1)*w - win
			low := p.Limit - 1 - (delta+s-1)/s
			per := make([]int64, windows)
			for _, a := range admitted {
				per[(a-start)/win]++
			}
			for i, got := range per[1:] {
				if got > p.Limit || got < low {
					t.Errorf("window %d: %d admitted, want %d..%d (all: %v)", i+1, got, max(low, 0), p.Limit, per)
				}
			}
		})
	}
}
