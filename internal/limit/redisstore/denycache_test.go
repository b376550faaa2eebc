package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestDenyCache(t *testing.T) {
	t.Parallel()
	const s = int64(time.Second)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	q := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}
	total := limit.Request{Key: "a|", Params: q}
	rule := limit.Request{Key: "a|/x", Params: p}
	keys := []string{"gw:{a}:", "gw:{a}:/x"}
	reqs := []limit.Request{total, rule}

	// The cache is direct-mapped with a random seed: draw seeds until the
	// two keys have slots of their own, so that the test is about lookup,
	// not about a collision it cannot control.
	c := newDenyCache(8)
	for {
		s0, _ := c.slot(keys[0])
		s1, _ := c.slot(keys[1])
		if s0 != s1 {
			break
		}
		c = newDenyCache(8)
	}
	res := make([]limit.Result, 2)
	if c.lookup(keys, reqs, 0, res) {
		t.Fatalf("empty cache: got a hit")
	}
	// Redis denied the request at 0: the rule until 30s, the total admitted.
	c.record(keys, reqs, []limit.Result{
		{Allowed: true, Limit: 100, Remaining: 42, Reset: 50 * time.Second},
		{Limit: 10, Reset: 40 * time.Second, RetryAfter: 30 * time.Second},
	}, 0, 0)
	tests := []struct {
		name    string
		keys    []string
		reqs    []limit.Request
		at      int64
		wantHit bool
		want    []limit.Result
	}{
		{
			name: "denied with the headers Redis gave", keys: keys, reqs: reqs, at: 10 * s, wantHit: true,
			want: []limit.Result{
				{Allowed: true, Limit: 100, Remaining: 42, Reset: 40 * time.Second},
				{Limit: 10, Reset: 30 * time.Second, RetryAfter: 20 * time.Second},
			},
		},
		{
			name: "the denied limit alone", keys: keys[1:], reqs: reqs[1:], at: 29 * s, wantHit: true,
			want: []limit.Result{{Limit: 10, Reset: 11 * time.Second, RetryAfter: time.Second}},
		},
		{name: "after the denial", keys: keys, reqs: reqs, at: 30 * s},
		{name: "the admitting limit alone", keys: keys[:1], reqs: reqs[:1], at: 10 * s},
		{name: "a limit the cache does not know", keys: []string{keys[1], "gw:{a}:/y"}, reqs: []limit.Request{rule, {Key: "a|/y", Params: p}}, at: 10 * s},
		{name: "shadow", keys: keys[1:], reqs: []limit.Request{{Key: "a|/x", Params: p, Shadow: true}}, at: 10 * s},
		// Denied for longer than the cheaper one, by how much only Redis
		// knows.
		{name: "a costlier request", keys: keys[1:], reqs: []limit.Request{{Key: "a|/x", Params: p, Cost: 3}}, at: 10 * s},
		{name: "reloaded params", keys: keys[1:], reqs: []limit.Request{{Key: "a|/x", Params: q}}, at: 10 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := make([]limit.Result, len(tt.reqs))
			if got := c.lookup(tt.keys, tt.reqs, tt.at, res); got != tt.wantHit {
				t.Fatalf("hit: got %v, want %v", got, tt.wantHit)
			}
			for i := range tt.want {
				if res[i] != tt.want[i] {
					t.Errorf("result %d: got %+v, want %+v", i, res[i], tt.want[i])
				}
			}
		})
	}
}

// TestDenyCacheIsBounded checks that a flood of denied keys does not grow
// the cache.
func TestDenyCacheIsBounded(t *testing.T) {
	t.Parallel()
	c := newDenyCache(100)
	if got := len(c.slots); got != 128 {
		t.Errorf("slots: got %d, want 128", got)
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	hits := 0
	for i := range 10_000 {
		key := fmt.Sprintf("gw:{*|10.0.%d.%d}|*|/", i/256, i%256)
		reqs := []limit.Request{{Key: key, Params: p}}
		c.record([]string{key}, reqs, []limit.Result{{Limit: 1, Reset: time.Minute, RetryAfter: time.Minute}}, 0, 0)
	}
	for i := range 10_000 {
		key := fmt.Sprintf("gw:{*|10.0.%d.%d}|*|/", i/256, i%256)
		if c.lookup([]string{key}, []limit.Request{{Key: key, Params: p}}, 1, make([]limit.Result, 1)) {
			hits++
		}
	}
	if got := len(c.slots); got != 128 {
		t.Errorf("slots after a flood: got %d, want 128", got)
	}
	if hits == 0 || hits > 128 {
		t.Errorf("hits after a flood of 10000 keys: got %d, want 1..128", hits)
	}
}

// TestRedisDenyCacheCost checks that the deny cache answers only for
// costs at least as great as the one Redis denied: a smaller cost that
// fits is decided by Redis and admitted, as one exact store admits it,
// and a cost above the limit's capacity does not block the key.
func TestRedisDenyCacheCost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, DialTimeout: 10 * time.Second, Leases: -1})
	p := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: 1000 * time.Hour}
	steps := []struct {
		cost  int64
		allow bool
	}{
		{cost: 5, allow: true},
		{cost: 6, allow: false},
		{cost: 7, allow: false},
		{cost: 5, allow: true}, // 5 of 10 left
		{cost: 11, allow: false},
		{cost: 1, allow: false},
		{cost: 11, allow: false},
	}
	for _, key := range []string{"dc-cost|/a", "dc-cost|/b"} {
		for i, s := range steps {
			if key == "dc-cost|/b" && i < 4 {
				continue // a fresh key meets a cost above capacity first
			}
			want := s.allow
			if key == "dc-cost|/b" && s.cost == 1 {
				want = true
			}
			res := make([]limit.Result, 1)
			got, err := red.Allow(context.Background(), time.Time{}, []limit.Request{{Key: key, Params: p, Cost: s.cost}}, res)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s step %d, cost %d: allowed %v, want %v (%+v)", key, i, s.cost, got, want, res[0])
			}
		}
	}
}

// TestDenyCacheCostlierRetryAfter denies a request of 100 units on a
// bucket that refills one unit an hour, then asks for 300: the Retry-After
// of both is the exact store's (100h, then 300h), not the cached denial's.
func TestDenyCacheCostlierRetryAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, Leases: -1})
	mem := newTestMemory(t)
	p := &limit.Params{Algorithm: "token_bucket", Limit: 1000, Window: 1000 * time.Hour}
	ctx := context.Background()
	ask := func(s limit.Store, q limit.Request) limit.Result {
		t.Helper()
		q.Key, q.Params = "costly|/x", p
		res := make([]limit.Result, 1)
		if _, err := s.Allow(ctx, time.Now(), []limit.Request{q}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	for _, s := range []limit.Store{red, mem} {
		ask(s, limit.Request{Cost: 1000, Act: limit.Charge})
	}
	for _, cost := range []int64{100, 100, 300, 300, 100} {
		got, want := ask(red, limit.Request{Cost: cost}), ask(mem, limit.Request{Cost: cost})
		if got.Allowed || got.RetryAfter.Round(time.Minute) != want.RetryAfter.Round(time.Minute) {
			t.Errorf("cost %d: Redis with its deny cache says %v, retry %v; the exact store %v, retry %v",
				cost, got.Allowed, got.RetryAfter, want.Allowed, want.RetryAfter)
		}
	}
}
