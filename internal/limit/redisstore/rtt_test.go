package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRTTWait feeds the wait for decisions a run of round trips and
// checks where it settles: at the floor for a fast Redis (one that then
// hangs fails after it), above the slowest round trip for a Redis that
// answers in 30–80ms, at the ceiling for one slower still, and back down
// when Redis is fast again; fixed when the floor is the ceiling.
func TestRTTWait(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name           string
		floor, ceiling time.Duration
		samples        []time.Duration // repeated in turn, 200 in all
		min, max       time.Duration   // the wait after them
	}{
		{name: "fast", floor: 25 * ms, ceiling: 250 * ms, samples: []time.Duration{ms / 2, ms, 2 * ms}, min: 25 * ms, max: 25 * ms},
		{name: "30-80ms", floor: 25 * ms, ceiling: 250 * ms, samples: []time.Duration{30 * ms, 80 * ms, 55 * ms, 42 * ms, 71 * ms}, min: 80 * ms, max: 250 * ms},
		{name: "slower", floor: 25 * ms, ceiling: 250 * ms, samples: []time.Duration{time.Second}, min: 250 * ms, max: 250 * ms},
		{name: "fixed", floor: 25 * ms, ceiling: 25 * ms, samples: []time.Duration{80 * ms}, min: 25 * ms, max: 25 * ms},
		{name: "ceiling below floor", floor: 500 * ms, ceiling: 250 * ms, samples: []time.Duration{time.Second}, min: 500 * ms, max: 500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRTT(tc.floor, tc.ceiling)
			if got := e.wait(); got != tc.floor {
				t.Errorf("before any round trip: got %v, want the floor %v", got, tc.floor)
			}
			for i := range 200 {
				e.observe(tc.samples[i%len(tc.samples)])
			}
			if got := e.wait(); got < tc.min || got > tc.max {
				t.Errorf("after %v: got %v, want within [%v, %v]", tc.samples, got, tc.min, tc.max)
			}
			// Fast again: back to the floor.
			for range 200 {
				e.observe(ms)
			}
			if got := e.wait(); got != tc.floor {
				t.Errorf("fast again: got %v, want the floor %v", got, tc.floor)
			}
		})
	}
}

// TestRedisWaitAdapts runs a store with the default timeouts against a
// Redis whose every reply comes 60ms late, longer than the 25ms floor:
// the first calls time out, their late answers teach the store Redis's
// round trip, and then Redis decides, the wait above the delay.
func TestRedisWaitAdapts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := redistest.NewPath(t, srv)
	red := newTestRedis(t, Config{URL: path.URL(), DialTimeout: 10 * time.Second, Leases: -1, DenyCacheSize: -1})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const delay = 60 * time.Millisecond
	path.SetDelay(func() time.Duration { return delay })
	p := &limit.Params{Algorithm: "fixed_window", Limit: limit.MaxLimit, Window: time.Hour}
	reqs := []limit.Request{{Key: "adapt|/", Params: p}}
	failed := 0
	eventually.True(t, 60*time.Second, func() bool {
		_, err := red.Allow(ctx, time.Now(), reqs, make([]limit.Result, 1))
		if err != nil {
			failed++
		}
		return err == nil
	}, "Redis never decided within the adapted wait (%v)", red.wait.rtt.wait())
	if w := red.wait.rtt.wait(); w < delay {
		t.Errorf("the wait is %v, shorter than Redis's %v round trip", w, delay)
	}
	t.Logf("%d calls failed before the wait adapted to %v", failed, red.wait.rtt.wait())
}
