package limit

import (
	"context"
	"testing"
	"time"
)

// costParams returns, for each algorithm, Params of 1,000 units per
// second.
func costParams() []Params {
	var ps []Params
	for _, alg := range Algorithms() {
		p := Params{Algorithm: alg, Limit: 1000, Window: time.Second}
		switch alg {
		case "sliding_window":
			p.Precision = 10
		case "sliding_log":
			p.Limit = MaxLogLimit / 10
		}
		ps = append(ps, p)
	}
	return ps
}

// allowOne decides one request at now and returns whether it was admitted
// and its Result.
func allowOne(t *testing.T, m *Memory, now time.Time, q Request) (bool, Result) {
	t.Helper()
	res := make([]Result, 1)
	ok, err := m.Allow(context.Background(), now, []Request{q}, res)
	if err != nil {
		t.Fatalf("Allow(%+v): %v", q, err)
	}
	return ok, res[0]
}

// TestCostAllOrNothing: a limit of L units admits L/10 requests of cost
// L/10 at one instant and not one more, each taking exactly its cost, and
// a denied request takes nothing.
func TestCostAllOrNothing(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_735_689_600, 0)
	for _, p := range costParams() {
		t.Run(p.Algorithm, func(t *testing.T) {
			t.Parallel()
			m := newTestMemory(t, MemoryConfig{})
			cost := p.Limit / 10
			q := Request{Key: "app|/chat", Params: &p, Cost: cost}
			for i := range int64(10) {
				ok, r := allowOne(t, m, t0, q)
				if !ok || r.Remaining != p.Limit-(i+1)*cost {
					t.Fatalf("request %d: got %v %+v, want admitted with %d left", i+1, ok, r, p.Limit-(i+1)*cost)
				}
			}
			ok, r := allowOne(t, m, t0, q)
			if ok || r.Remaining != 0 || r.RetryAfter <= 0 {
				t.Fatalf("request 11: got %v %+v, want denied with a RetryAfter", ok, r)
			}
			// The 11th took nothing: one unit still does not fit, and at
			// RetryAfter the whole cost does.
			if ok, _ := allowOne(t, m, t0, Request{Key: q.Key, Params: &p}); ok {
				t.Fatalf("a request of 1 unit was admitted on a spent limit")
			}
			if ok, r2 := allowOne(t, m, t0.Add(r.RetryAfter), q); !ok {
				t.Fatalf("at RetryAfter %v: denied %+v", r.RetryAfter, r2)
			}
		})
	}
}

// TestCostAboveCapacity: a cost above the limit's capacity is never
// admitted, and costs the limit nothing.
func TestCostAboveCapacity(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_735_689_600, 0)
	for _, p := range costParams() {
		t.Run(p.Algorithm, func(t *testing.T) {
			m := newTestMemory(t, MemoryConfig{})
			q := Request{Key: "k", Params: &p, Cost: p.Capacity() + 1}
			if ok, r := allowOne(t, m, t0, q); ok || r.Allowed {
				t.Fatalf("cost %d above capacity %d: admitted %+v", q.Cost, p.Capacity(), r)
			}
			q.Cost = p.Capacity()
			if ok, r := allowOne(t, m, t0, q); !ok || r.Remaining != 0 {
				t.Fatalf("cost %d = capacity on a fresh limit: got %v %+v, want admitted with 0 left", q.Cost, ok, r)
			}
		})
	}
}

// TestDeferAndCharge: a deferred request is admitted while the limit has
// room for its cost and counts nothing; a charge counts unconditionally,
// past the limit, and the limit then denies until it has drained.
func TestDeferAndCharge(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_735_689_600, 0)
	for _, p := range costParams() {
		t.Run(p.Algorithm, func(t *testing.T) {
			t.Parallel()
			m := newTestMemory(t, MemoryConfig{})
			key := "app|/chat"
			for i := range 3 {
				ok, r := allowOne(t, m, t0, Request{Key: key, Params: &p, Cost: 5, Act: Defer})
				if !ok || r.Remaining != p.Limit || r.Reset != 0 {
					t.Fatalf("deferred %d: got %v %+v, want admitted, %d left, nothing counted", i, ok, r, p.Limit)
				}
			}
			// Charge 30 units, then the whole limit again: 30 past it.
			_, r := allowOne(t, m, t0, Request{Key: key, Params: &p, Cost: 30, Act: Charge})
			if !r.Allowed || r.Remaining != p.Limit-30 {
				t.Fatalf("charge of 30: got %+v, want %d left", r, p.Limit-30)
			}
			ok, r := allowOne(t, m, t0, Request{Key: key, Params: &p, Cost: p.Limit, Act: Charge})
			if !ok || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
				t.Fatalf("charge past the limit: got %v %+v, want the call allowed and the limit left at 0 and denying", ok, r)
			}
			wait := r.RetryAfter
			if ok, r := allowOne(t, m, t0, Request{Key: key, Params: &p, Act: Defer}); ok {
				t.Fatalf("deferred request on an overcharged limit: admitted %+v", r)
			}
			if ok, r := allowOne(t, m, t0.Add(wait-time.Nanosecond), Request{Key: key, Params: &p}); ok {
				t.Fatalf("admitted %v before the charge drained (RetryAfter %v): %+v", time.Nanosecond, wait, r)
			}
			if ok, r := allowOne(t, m, t0.Add(wait), Request{Key: key, Params: &p}); !ok {
				t.Fatalf("denied at the charge's RetryAfter %v: %+v", wait, r)
			}
		})
	}
}

// TestChargeGCRA: a charge of n units moves a token bucket's due by n
// emission intervals (x/time/rate's ReserveN), so a full refill takes
// n·Window/Limit.
func TestChargeGCRA(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_735_689_600, 0)
	for _, alg := range []string{"token_bucket", "leaky_bucket"} {
		p := Params{Algorithm: alg, Limit: 10, Window: time.Second}
		m := newTestMemory(t, MemoryConfig{})
		_, r := allowOne(t, m, t0, Request{Key: "k", Params: &p, Cost: 15, Act: Charge})
		if r.Reset != 1500*time.Millisecond {
			t.Errorf("%s: charge of 15 at 10/s: Reset %v, want 1.5s", alg, r.Reset)
		}
		// One token is back once the debt is under capacity-1 intervals:
		// 1.5s - 0.9s.
		if r.RetryAfter != 600*time.Millisecond {
			t.Errorf("%s: charge of 15 at 10/s: RetryAfter %v, want 600ms", alg, r.RetryAfter)
		}
	}
}

// TestCostAtomic: with costs, a request denied by one limit takes nothing
// from the others, deferred and charged ones included.
func TestCostAtomic(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_735_689_600, 0)
	m := newTestMemory(t, MemoryConfig{})
	total := Params{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}
	rule := Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 6}
	reqs := []Request{
		{Key: "app|", Params: &total, Cost: 50},
		{Key: "app|/x", Params: &rule, Cost: 11},
	}
	res := make([]Result, 2)
	ok, err := m.Allow(context.Background(), t0, reqs, res)
	if err != nil || ok {
		t.Fatalf("cost 11 on a rule of 10: got %v, %v; want denied", ok, err)
	}
	if res[0].Remaining != 100 {
		t.Errorf("the total after a denied request: %d left, want 100", res[0].Remaining)
	}
	reqs[1].Cost = 10
	if ok, _ := m.Allow(context.Background(), t0, reqs, res); !ok || res[0].Remaining != 50 || res[1].Remaining != 0 {
		t.Fatalf("costs 50 and 10: got %v %+v, want admitted with 50 and 0 left", ok, res)
	}
}
