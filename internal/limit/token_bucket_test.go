package limit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func tbParams(limit int64, window time.Duration, burst int64, warmup time.Duration) *Params {
	return &Params{Algorithm: "token_bucket", Limit: limit, Window: window, Burst: burst, Warmup: warmup}
}

func TestTokenBucketSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	// third is a third of a second, 333333333⅓ns, rounded up.
	const third = 333333334 * time.Nanosecond
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			// T = 1s/3 is not a whole number of nanoseconds; the bucket
			// keeps it exact.
			name: "3 per second starts full",
			p:    tbParams(3, sec, 0, 0),
			steps: []step{
				{at: 0, allow: true, remaining: 2, reset: third},
				{at: 0, allow: true, remaining: 1, reset: 2*third - 1},
				{at: 0, allow: true, remaining: 0, reset: sec},
				{at: 0, retryAfter: third, reset: sec},
				{at: third - 1, retryAfter: 1, reset: sec - third + 1},
				{at: third, allow: true, remaining: 0, reset: sec},
				{at: third, retryAfter: third - 1, reset: sec},
				// Two tokens back at 1s, three at 4/3s.
				{at: sec, allow: true, remaining: 1, reset: 2*third - 1},
				{at: 5 * sec, allow: true, remaining: 2, reset: third},
			},
		},
		{
			name: "burst 5 at 1 per second",
			p:    tbParams(1, sec, 5, 0),
			steps: []step{
				{at: 0, allow: true, remaining: 4, reset: sec},
				{at: 0, allow: true, remaining: 3, reset: 2 * sec},
				{at: 0, allow: true, remaining: 2, reset: 3 * sec},
				{at: 0, allow: true, remaining: 1, reset: 4 * sec},
				{at: 0, allow: true, remaining: 0, reset: 5 * sec},
				{at: 0, retryAfter: sec, reset: 5 * sec},
				{at: sec, allow: true, remaining: 0, reset: 5 * sec},
				{at: 2500 * ms, allow: true, remaining: 0, reset: 4500 * ms},
				{at: 2500 * ms, retryAfter: 500 * ms, reset: 4500 * ms},
			},
		},
		{
			name: "burst 1 is a steady pace",
			p:    tbParams(2, sec, 1, 0),
			steps: []step{
				{at: 0, allow: true, remaining: 0, reset: 500 * ms},
				{at: 0, retryAfter: 500 * ms, reset: 500 * ms},
				{at: 499 * ms, retryAfter: ms, reset: ms},
				{at: 500 * ms, allow: true, remaining: 0, reset: 500 * ms},
				{at: 2 * sec, allow: true, remaining: 0, reset: 500 * ms},
			},
		},
		{
			// The time to full stays: half empty stays half empty.
			name: "limit change keeps how full the bucket is",
			p:    tbParams(4, sec, 0, 0),
			steps: []step{
				{at: 0, allow: true, remaining: 3, reset: 250 * ms},
				{at: 0, allow: true, remaining: 2, reset: 500 * ms},
				{at: 0, params: tbParams(8, sec, 0, 0), allow: true, remaining: 3, reset: 625 * ms},
				{at: 0, params: tbParams(2, sec, 0, 0), retryAfter: 125 * ms, reset: 625 * ms},
				{at: 0, params: tbParams(3, sec, 0, 0), allow: true, remaining: 0, reset: 625*ms + third},
			},
		},
		{
			name:  "limit 0 blocks",
			p:     tbParams(0, sec, 5, 0),
			steps: []step{{at: 0, retryAfter: sec, reset: sec}},
		},
		{
			name:  "unlimited",
			p:     tbParams(Unlimited, sec, 0, 0),
			steps: []step{{at: 0, allow: true, remaining: -1}, {at: 0, allow: true, remaining: -1}},
		},
		{
			name: "time going backwards",
			p:    tbParams(2, sec, 0, 0),
			steps: []step{
				{at: sec, allow: true, remaining: 1, reset: 500 * ms},
				{at: sec, allow: true, remaining: 0, reset: sec},
				{at: 0, retryAfter: 1500 * ms, reset: 2 * sec},
				{at: 1500 * ms, allow: true, remaining: 0, reset: sec},
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

// TestTokenBucketWarmupSteps checks the warm-up against Guava's example
// and with a burst.
func TestTokenBucketWarmupSteps(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	tests := []struct {
		name  string
		p     *Params
		steps []step
	}{
		{
			// Guava's RateLimiter.create(5, 1500, MILLISECONDS) waits
			// 0, 0.543, 0.434, 0.333, 0.230, then 0.200 (measured on a
			// real clock). Exactly: 546.67ms, 440ms, 333.33ms, 230ms.
			name: "Guava SmoothWarmingUp",
			p:    tbParams(5, sec, 1, 1500*ms),
			steps: []step{
				{at: 0, allow: true, remaining: 0, reset: 546666666},
				{at: 546666665, retryAfter: 1, reset: 1},
				{at: 546666666, allow: true, remaining: 0, reset: 440 * ms},
				{at: 986666666, allow: true, remaining: 0, reset: 333333334},
				{at: 1320 * ms, allow: true, remaining: 0, reset: 230 * ms},
				{at: 1550 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 1750 * ms, allow: true, remaining: 0, reset: 200 * ms},
				// The bucket is full at 1.95s with 300ms of coldness;
				// 1.2s later it is cold again.
				{at: 3150 * ms, allow: true, remaining: 0, reset: 546666666},
			},
		},
		{
			name: "idle for half the warm-up is warm",
			p:    tbParams(5, sec, 1, 1500*ms),
			steps: []step{
				{at: 0, allow: true, remaining: 0, reset: 546666666},
				{at: 546666666, allow: true, remaining: 0, reset: 440 * ms},
				{at: 986666666, allow: true, remaining: 0, reset: 333333334},
				{at: 1320 * ms, allow: true, remaining: 0, reset: 230 * ms},
				{at: 1550 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 1750 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 1950 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 2150 * ms, allow: true, remaining: 0, reset: 200 * ms},
				// The coldness is spent at 2.35s, and 650ms later it is
				// still under w/2 = 750ms: no extra cost.
				{at: 3 * sec, allow: true, remaining: 0, reset: 200 * ms},
				{at: 3200 * ms, allow: true, remaining: 0, reset: 200 * ms},
			},
		},
		{
			// Warm, 10 a second with a burst of 10 admits 10 at once;
			// cold, each of the first requests costs more, and the burst
			// shrinks to 5.
			name: "a cold burst",
			p:    tbParams(10, sec, 10, sec),
			steps: []step{
				{at: 0, allow: true, remaining: 4, reset: 280 * ms},
				{at: 0, allow: true, remaining: 3, reset: 520 * ms},
				{at: 0, allow: true, remaining: 2, reset: 720 * ms},
				{at: 0, allow: true, remaining: 1, reset: 880 * ms},
				{at: 0, allow: true, remaining: 0, reset: sec},
				{at: 0, retryAfter: 100 * ms, reset: sec},
				{at: 100 * ms, allow: true, remaining: 0, reset: sec},
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

// refBucket replays log against a textbook token bucket in exact
// arithmetic — tokens refill continuously at Limit per Window up to the
// capacity, a request takes one if there is one — or, with leaky, a
// textbook leaky bucket as a meter: the level drains continuously, and a request is
// admitted if level+1 ≤ capacity. Tokens and levels are counted in units
// of 1/Window, so that a refill of elapsed·Limit/Window is a whole number
// (the random Params keep the products within int64). It returns the
// first decision that differs.
func refBucket(log []decision, p *Params, leaky bool) error {
	w := int64(p.Window)
	capacity := capacity(p) * w
	tokens := capacity // for the leaky bucket: the level
	if leaky {
		tokens = 0
	}
	last := log[0].at
	for i, d := range log {
		flow := (d.at - last) * p.Limit
		last = d.at
		var want bool
		if leaky {
			tokens = max(tokens-flow, 0)
			if want = tokens+w <= capacity; want {
				tokens += w
			}
		} else {
			tokens = min(tokens+flow, capacity)
			if want = tokens >= w; want {
				tokens -= w
			}
		}
		if d.allowed != want {
			return fmt.Errorf("decision %d at %d: allowed %v, want %v (tokens or level %.3f)", i, d.at, d.allowed, want, float64(tokens)/float64(w))
		}
	}
	return nil
}

// TestTokenBucketGuarantee is the guarantee in docs/algorithms.md, "Algorithms"
// table: never more than
// Burst + rate·t admitted in any interval of length t, with or without a
// warm-up. Without one, every decision is also exactly that of a textbook
// token bucket in exact arithmetic.
func TestTokenBucketGuarantee(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for c := range 300 {
		p := randomBucketParams(rng, "token_bucket")
		if rng.IntN(3) == 0 {
			p.Warmup = time.Duration(1 + rng.Int64N(3*int64(p.Window)))
		}
		start := t0.UnixNano() + rng.Int64N(int64(p.Window))
		arrivals := arrivals(rng, p, start, time.Nanosecond)
		t.Run(fmt.Sprintf("%d/limit=%d,window=%v,burst=%d,warmup=%v", c, p.Limit, p.Window, p.Burst, p.Warmup), func(t *testing.T) {
			log, admitted := offer(t, p, arrivals, p.Warmup == 0)
			if err := rateBound(admitted, capacity(p), p); err != nil {
				t.Error(err)
			}
			if p.Warmup == 0 {
				if err := refBucket(log, p, false); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestTokenBucketWarmupRamp checks the warm-up's promise on a client that
// asks as often as it is allowed (a burst of 1, Guava's case): from cold,
// the first request waits about 3 intervals, each wait is no longer than
// the one before, over the warm-up period the client gets half of what a
// warm one gets, and after it every wait is one interval. After idling
// for the warm-up period the bucket is cold again.
func TestTokenBucketWarmupRamp(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 14))
	for c := range 100 {
		p := randomBucketParams(rng, "token_bucket")
		p.Burst = 1
		T := float64(p.Window) / float64(p.Limit)
		p.Warmup = time.Duration(T * (10 + 40*rng.Float64()))
		if T < 10_000 || p.Validate() != nil {
			// Waits are whole nanoseconds: a ramp needs intervals of
			// many. And a warm-up may not exceed a day.
			continue
		}
		t.Run(fmt.Sprintf("%d/limit=%d,window=%v,warmup=%v", c, p.Limit, p.Window, p.Warmup), func(t *testing.T) {
			st := newState(t, p)
			w := float64(p.Warmup)
			// saturate admits as often as allowed from start until end,
			// and returns the admitted instants.
			saturate := func(start, end int64) []int64 {
				var got []int64
				for now := start; now < end; {
					r := st.Decide(now, p, 1)
					if !r.Allowed {
						now += int64(r.RetryAfter)
						continue
					}
					st.Commit(now, p, 1)
					got = append(got, now)
				}
				return got
			}
			start := t0.UnixNano()
			end := start + int64(2*w+4*T)
			got := saturate(start, end)
			gaps := make([]float64, len(got)-1)
			for i := range gaps {
				gaps[i] = float64(got[i+1] - got[i])
			}
			if g := gaps[0]; g < 2.8*T || g > 3*T+1 {
				t.Errorf("first wait %v, want about 3 intervals of %v", time.Duration(g), time.Duration(T))
			}
			for i := 1; i < len(gaps); i++ {
				if gaps[i] > gaps[i-1]+1 {
					t.Errorf("wait %d is %v, longer than the one before, %v", i, time.Duration(gaps[i]), time.Duration(gaps[i-1]))
					break
				}
			}
			inWarmup := 0
			for _, a := range got {
				if float64(a-start) < w {
					inWarmup++
				}
			}
			// After the warm-up every wait is T, up to rounding to whole
			// nanoseconds.
			for i, g := range gaps {
				if float64(got[i+1]-start) > w+T+1 && (g < T-1 || g > T+1) {
					t.Errorf("wait %d at %v after the start: %v, want %v", i, time.Duration(got[i+1]-start), time.Duration(g), time.Duration(T))
					break
				}
			}
			if half := w / (2 * T); float64(inWarmup) < half-1 || float64(inWarmup) > half+1 {
				t.Errorf("%d admitted during the warm-up, want about %.1f (half of %.1f)", inWarmup, half, w/T)
			}

			// Idle for the warm-up: cold again.
			last := got[len(got)-1]
			again := saturate(last+int64(T)+int64(w)+1, last+int64(T)+int64(w)+int64(4*T))
			if g := float64(again[1] - again[0]); g < 2.8*T || g > 3*T+1 {
				t.Errorf("first wait after idling %v, want about 3 intervals of %v", time.Duration(g), time.Duration(T))
			}
		})
	}
}
