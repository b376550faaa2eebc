package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisLayoutsShareCounters checks the fleet of a rolling upgrade
// (docs/fleet.md, "Upgrading"): a store that keeps its counters as
// strings and one that keeps them as hashes (--redis-layout hash, as
// earlier releases did) count on the same keys, each reading what the
// other wrote, and together decide every request as the memory store
// decides the one stream of them. Each writes its own layout, but the
// sliding log, a hash in both.
func TestRedisLayoutsShareCounters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	clock := &fixedClock{}
	clock.us.Store(us0)
	open := func(layout string) *Store {
		r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Leases: -1, Timeout: 10 * time.Second, Layout: layout})
		r.fixedNow = clock.us.Load
		return r
	}
	stores := map[string]*Store{LayoutString: open(LayoutString), LayoutHash: open(LayoutHash)}
	for _, alg := range limit.Algorithms() {
		a, _ := limit.Lookup(alg)
		if _, ok := a.(limit.RedisAlgorithm); !ok {
			continue
		}
		t.Run(alg, func(t *testing.T) {
			mem, err := limit.NewMemory(limit.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			p := &limit.Params{Algorithm: alg, Limit: 5, Window: time.Second}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			q := limit.Request{Key: "layouts|/" + alg, Params: p}
			keys, _, _, err := redisKeys([]limit.Request{q})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for i := range 60 {
				// Both layouts in turn, in runs of one to three.
				layout := []string{LayoutString, LayoutHash}[(i*7/3)%2]
				now := us0 + int64(i)*83_000
				where := fmt.Sprintf("request %d (%s)", i, layout)
				mres, rres := make([]limit.Result, 1), make([]limit.Result, 1)
				if _, err := mem.Allow(ctx, time.Unix(0, now*1000), []limit.Request{q}, mres); err != nil {
					t.Fatal(err)
				}
				clock.us.Store(now)
				if _, err := stores[layout].Allow(ctx, time.Time{}, []limit.Request{q}, rres); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				m, r := mres[0], rres[0]
				if m.Allowed != r.Allowed || m.Remaining != r.Remaining || !nearUp(m.RetryAfter, r.RetryAfter, 0) || !nearUp(m.Reset, r.Reset, 0) {
					t.Fatalf("%s: got %+v in redis, want %+v as in memory", where, r, m)
				}
				kind, err := c.Type(ctx, keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				kinds[kind]++
				// An admission writes the counter in its store's layout.
				want := map[bool]string{true: "hash", false: "string"}[layout == LayoutHash || alg == "sliding_log"]
				if r.Allowed && kind != want {
					t.Fatalf("%s: the counter is a %s, want a %s", where, kind, want)
				}
			}
			if alg != "sliding_log" && (kinds["string"] == 0 || kinds["hash"] == 0) {
				t.Errorf("the counter was %v, want both layouts in turn", kinds)
			}
		})
	}
}

// TestRedisLayoutConfig checks that a store refuses a layout it does not
// know.
func TestRedisLayoutConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{URL: "redis://127.0.0.1:1/0", Layout: "list"})
	if err == nil || !strings.Contains(err.Error(), `layout "list"`) {
		t.Fatalf("New with layout list: %v, want an error naming it", err)
	}
}
