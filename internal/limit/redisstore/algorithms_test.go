package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisWarmupSteps checks token_bucket's warm-up in Lua on the step
// tables of TestTokenBucketWarmupSteps, in microseconds: Guava's
// example, whose costs round to whole microseconds (546.666ms, not
// 546.666666ms, since G rounds up and the cost is a difference of G's),
// and a cold burst, whose numbers are round.
func TestRedisWarmupSteps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ms = 1000 // µs
	tests := []struct {
		name  string
		p     *limit.Params
		steps []redisStep
	}{
		{
			name: "Guava SmoothWarmingUp",
			p:    &limit.Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 1, Warmup: 1500 * time.Millisecond},
			steps: []redisStep{
				{at: 0, allow: true, remaining: 0, reset: 546666},
				{at: 546665, retryAfter: 1, reset: 1},
				{at: 546666, allow: true, remaining: 0, reset: 440 * ms},
				{at: 986666, allow: true, remaining: 0, reset: 333334},
				{at: 1320 * ms, allow: true, remaining: 0, reset: 230 * ms},
				{at: 1550 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 1750 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 3150 * ms, allow: true, remaining: 0, reset: 546666},
			},
		},
		{
			name: "a cold burst",
			p:    &limit.Params{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 10, Warmup: time.Second},
			steps: []redisStep{
				{at: 0, allow: true, remaining: 4, reset: 280 * ms},
				{at: 0, allow: true, remaining: 3, reset: 520 * ms},
				{at: 0, allow: true, remaining: 2, reset: 720 * ms},
				{at: 0, allow: true, remaining: 1, reset: 880 * ms},
				{at: 0, allow: true, remaining: 0, reset: 1000 * ms},
				{at: 0, retryAfter: 100 * ms, reset: 1000 * ms},
				{at: 100 * ms, allow: true, remaining: 0, reset: 1000 * ms},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			runRedisSteps(t, red, clock, "warm|/"+tt.name, tt.p, tt.steps)
		})
	}
}

// redisStep is one request of a Redis step table, in µs from us0.
type redisStep struct {
	at                int64
	allow             bool
	remaining         int64
	retryAfter, reset int64
}

// runRedisSteps runs steps against key and reports the step that fails.
func runRedisSteps(t *testing.T, red *Store, clock *fixedClock, key string, p *limit.Params, steps []redisStep) {
	t.Helper()
	res := make([]limit.Result, 1)
	for i, s := range steps {
		clock.us.Store(us0 + s.at)
		if _, err := red.Allow(context.Background(), time.Time{}, []limit.Request{{Key: key, Params: p}}, res); err != nil {
			t.Fatal(err)
		}
		want := limit.Result{Allowed: s.allow, Limit: p.Limit, Remaining: s.remaining, RetryAfter: us(s.retryAfter), Reset: us(s.reset)}
		if res[0] != want {
			t.Errorf("step %d (+%dµs): got %+v, want %+v", i, s.at, res[0], want)
		}
	}
}

// TestRedisGuarantees checks the guarantee of every algorithm (the
// docs/algorithms.md, "Algorithms" table)
// against real Redis: random arrivals, bunched on the edges where
// algorithms slip, are offered to one key in order, and the admitted
// instants must keep the guarantee.
func TestRedisGuarantees(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			ctx := context.Background()
			for seed := range 6 {
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				p := redisParams(rng, alg)
				p.Limit, p.Lock = 1+rng.Int64N(10), 0
				if p.Burst > 3*p.Limit {
					p.Burst = 3 * p.Limit
				}
				if alg == "token_bucket" && rng.IntN(2) == 0 {
					p.Warmup = p.Window
				}
				if err := p.Validate(); err != nil {
					t.Fatalf("%+v: %v", *p, err)
				}
				key := fmt.Sprintf("g%d|/%s", seed, alg)
				start := us0 + rng.Int64N(1_000_000)
				var admitted, denied []int64
				res := make([]limit.Result, 1)
				for _, at := range limittest.Arrivals(rng, p, start, time.Microsecond) {
					clock.us.Store(at)
					ok, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: key, Params: p}}, res)
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						admitted = append(admitted, at)
					} else {
						denied = append(denied, at)
					}
				}
				if len(admitted) == 0 {
					t.Fatalf("%+v: nothing admitted", *p)
				}
				if err := checkGuarantee(p, admitted, denied); err != nil {
					t.Errorf("%+v: %v", *p, err)
				}
			}
		})
	}
}

// checkGuarantee checks the admitted and denied instants (µs, sorted) of
// one key against p's guarantee (docs/algorithms.md, "Algorithms" table).
func checkGuarantee(p *limit.Params, admitted, denied []int64) error {
	w, l := micros(p.Window), int(p.Limit)
	switch p.Algorithm {
	case "sliding_window", "sliding_log":
		// No closed interval of length Window holds more than Limit.
		for i := 0; i+l < len(admitted); i++ {
			if admitted[i+l]-admitted[i] <= w {
				return fmt.Errorf("%d admitted in [%d, %d], within one window", l+1, admitted[i], admitted[i+l])
			}
		}
		if p.Algorithm == "sliding_log" {
			// Exact: a request is denied only when the interval ending at
			// it holds Limit.
			for _, d := range denied {
				lo, _ := slices.BinarySearch(admitted, d-w)
				hi, _ := slices.BinarySearch(admitted, d+1)
				if hi-lo != l {
					return fmt.Errorf("denied at %d with %d admitted in [%d, %d]", d, hi-lo, d-w, d)
				}
			}
		}
	case "fixed_window":
		count := map[int64]int{}
		for _, a := range admitted {
			if count[a/w]++; count[a/w] > l {
				return fmt.Errorf("more than %d admitted in window %d", l, a/w)
			}
		}
	default:
		ns := make([]int64, len(admitted))
		for i, a := range admitted {
			ns[i] = (a - us0) * 1000
		}
		return limittest.RateBound(ns, p.Capacity(), p)
	}
	return nil
}

// TestRedisSlidingWindowSteadyStream checks the other half of
// sliding_window's guarantee on Redis: a steady stream above the limit
// still gets Limit·P/(P+1) per window in the long run.
func TestRedisSlidingWindowSteadyStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	p := &limit.Params{Algorithm: "sliding_window", Limit: 20, Window: time.Second, Precision: 4}
	const windows = 20
	res := make([]limit.Result, 1)
	admitted := 0
	for at := us0; at < us0+windows*1_000_000; at += 1_000_000 / 60 { // three times the limit
		clock.us.Store(at)
		ok, err := red.Allow(context.Background(), time.Time{}, []limit.Request{{Key: "steady|/", Params: p}}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if want := windows * 20 * 4 / 5; admitted < want-20 || admitted > windows*20 {
		t.Errorf("admitted over %d windows: got %d, want about %d (at most %d)", windows, admitted, want, windows*20)
	}
}

// TestRedisSlidingWindowRing checks sliding_window's ring in Redis over
// sparse requests on one key: no gap, gaps within a bucket, within a
// window and past it, so that totals of 1, 2 and more move on from their
// head bucket by less than a ring and by more, and some requests are
// denied. The stores decide alike (storePair), and after every decision
// the counter's total is the sum of its buckets (checkRing) and, when not
// 0, its head bucket's count is not (no tokens are given back here, which
// may empty it: TestRedisSlidingWindowLeaseGivenBack).
func TestRedisSlidingWindowRing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	for seed := range 12 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		prec := 1 + rng.IntN(12)
		p := &limit.Params{Algorithm: "sliding_window", Limit: 1 + rng.Int64N(3), Precision: prec,
			Window: us(int64(prec) * (1 + rng.Int64N(200_000)))}
		app := fmt.Sprintf("ring-%d", seed)
		key := app + "|/a"
		pair := newStorePair(t, red, clock)
		w, n := micros(p.Window), int64(prec+1)
		now := us0 + rng.Int64N(1_000_000)
		for step := range 150 {
			now += []int64{0, rng.Int64N(w/int64(prec) + 1), rng.Int64N(w), w + rng.Int64N(w*3/2)}[rng.IntN(4)]
			where := fmt.Sprintf("%+v, step %d", *p, step)
			pair.allow(now, []limit.Request{{Key: key, Params: p}}, func() string { return where })
			h := checkRing(t, srv, redisKey(app, key), where)
			total, _ := strconv.ParseInt(h["t"], 10, 64)
			head, _ := strconv.ParseInt(h["h"], 10, 64)
			if c, _ := strconv.ParseInt(h[strconv.FormatInt(head%n, 10)], 10, 64); total > 0 && c < 1 {
				t.Fatalf("%s: the head bucket %d is empty with a total of %d: %v", where, head, total, h)
			}
		}
	}
}
