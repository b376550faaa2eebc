package stores

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// fleetGW is one gateway of a fleet test: its stores, as serve builds
// them with the default flags, behind --fail-mode local.
type fleetGW struct {
	st   *stores
	fo   *failmode.Failover
	path *redistest.Path
}

// startFleet starts n gateways with the default flags, each on its own
// path to srv, ready and registered in the fleet (each has sent its first
// heartbeat, in turn).
func startFleet(t testing.TB, srv *redistest.Server, paths []*redistest.Path) []*fleetGW {
	t.Helper()
	return startFleetWith(t, srv, paths, nil)
}

// startFleetWith is startFleet with each gateway's Config changed by
// edit, if not nil.
func startFleetWith(t testing.TB, srv *redistest.Server, paths []*redistest.Path, edit func(*Config)) []*fleetGW {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gws := make([]*fleetGW, len(paths))
	log := slog.New(slog.DiscardHandler)
	for i, path := range paths {
		cfg := DefaultConfig()
		cfg.Store, cfg.RedisURL, cfg.Logger = StoreRedis, path.URL(), log
		if edit != nil {
			edit(&cfg)
		}
		st, err := newStore(cfg, func(bool) {})
		if err != nil {
			t.Fatal(err)
		}
		fo, err := failmode.New(failmode.Config{Mode: failmode.Local, Store: st.store, Local: st.local, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		redistest.Ready(t, st.redis)
		st.runFleet(ctx, log)
		eventually.True(t, 10*time.Second, func() bool { return st.redis.FleetSize() == i+1 }, "gateway %d did not register", i+1)
		gws[i] = &fleetGW{st: st, fo: fo, path: path}
	}
	t.Cleanup(func() {
		cancel()
		for _, g := range gws {
			g.st.close()
		}
	})
	return gws
}

// hammer sends conns × each requests for one key, spread over gws,
// and returns how many were admitted.
func hammer(gws []*fleetGW, p *limit.Params, key string, conns, each int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for c := range conns {
		g := gws[c%len(gws)]
		wg.Go(func() {
			res := make([]limit.Result, 1)
			for range each {
				reqs := []limit.Request{{Key: key, Params: p}}
				ok, v, _ := g.fo.Allow(context.Background(), time.Now(), reqs, res, func(int) *limit.Params { return p })
				if ok && (v == failmode.StoreDecided || v == failmode.LocalDecided) {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// slow makes each path answer in 30 to 80 ms: later than the default
// --redis-timeout of 25ms.
func slow(gws []*fleetGW) {
	for _, g := range gws {
		g.path.SetDelay(func() time.Duration { return 30*time.Millisecond + rand.N(50*time.Millisecond) })
	}
}

// TestFleetSlowRedisBound runs three fresh gateways with the default
// flags against a Redis that answers in 30–80ms, later than their
// --redis-timeout (their wait adapts; and, in some runs, with the wait
// fixed at it), while 30 connections hammer one key limited to 100 per
// 600s:
// in every run the fleet admits no more than docs/fleet.md's bound,
// limit + Σ ceil(share × limit) over the gateways, each at the share it
// had (at most the default 0.1 until it has seen the whole fleet, then 1
// / the fleet size); and when the key was full before Redis slowed,
// exactly the limit: each gateway refuses locally what Redis last said
// was full.
func TestFleetSlowRedisBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lim = 100
	p := &limit.Params{Algorithm: "sliding_window", Limit: lim, Window: 600 * time.Second, Precision: 10}
	bound := func(gws []*fleetGW) int64 {
		b := int64(lim)
		for _, g := range gws {
			b += int64(math.Ceil(g.st.local.(*fleetShare).share()*lim - 1e-9))
		}
		return b
	}
	run := func(t *testing.T, name string, edit func(*Config), setup func(gws []*fleetGW, key string)) {
		if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		paths := []*redistest.Path{redistest.NewPath(t, srv), redistest.NewPath(t, srv), redistest.NewPath(t, srv)}
		var gws []*fleetGW
		if edit == nil {
			gws = startFleet(t, srv, paths)
		} else {
			gws = startFleetWith(t, srv, paths, edit)
		}
		key := "fleet|/" + name
		before := int64(0)
		if setup != nil {
			setup(gws, key)
			before = hammer(gws, p, key, 3, lim/3+1) // fills it, through each gateway
			// Each gateway hears from Redis that it is full.
			for _, g := range gws {
				if n := hammer([]*fleetGW{g}, p, key, 1, 1); n != 0 {
					t.Fatalf("%s: a request after the limit was admitted", name)
				}
			}
		}
		slow(gws)
		during := hammer(gws, p, key, 30, 20)
		got, b := before+during, bound(gws)
		t.Logf("%s: admitted %d (%d before Redis slowed), bound %d", name, got, before, b)
		if got > b {
			t.Errorf("%s: the fleet admitted %d of a limit of %d, above the stated bound %d", name, got, lim, b)
		}
		if setup != nil && got != lim {
			t.Errorf("%s: the key was full before Redis slowed, and the fleet admitted %d, want exactly %d", name, got, lim)
		}
	}
	for i := range 20 {
		t.Run(fmt.Sprintf("fresh-%d", i), func(t *testing.T) { run(t, fmt.Sprintf("fresh-%d", i), nil, nil) })
	}
	// With the wait fixed at 25ms, shorter than every reply: the fleet
	// decides locally, on the shares the bound states.
	fixed := func(cfg *Config) { cfg.RedisMaxTimeout = cfg.RedisTimeout }
	for i := range 5 {
		t.Run(fmt.Sprintf("fixed-wait-%d", i), func(t *testing.T) { run(t, fmt.Sprintf("fixed-wait-%d", i), fixed, nil) })
	}
	for i := range 3 {
		name := fmt.Sprintf("full-%d", i)
		t.Run(name, func(t *testing.T) {
			run(t, name, nil, func(gws []*fleetGW, key string) {
				// Every gateway has seen the fleet, and hears from Redis
				// that the key is full.
				for _, g := range gws {
					eventually.True(t, 10*time.Second, g.st.redis.FleetSeen, "a gateway did not see the fleet")
				}
			})
		})
	}
}

// TestFleetEmptyBucketLocally empties a token bucket and a leaky bucket
// through two gateways (each hears from Redis that it is empty), waits
// until a token has come back, then cuts Redis off: the fleet, deciding
// locally, admits what the bucket refilled since Redis said it was
// empty, plus at most one request per gateway for rounding up its share
// (docs/fleet.md, "When Redis fails": exactly the limit when every
// gateway last heard the counter was full), not a share of the burst each
// as if the bucket were full once a token came back.
func TestFleetEmptyBucketLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []string{"token_bucket", "leaky_bucket"} {
		t.Run(alg, func(t *testing.T) {
			// 4 per second, a burst of 40.
			p := &limit.Params{Algorithm: alg, Limit: 40, Window: 10 * time.Second, Burst: 40}
			paths := []*redistest.Path{redistest.NewPath(t, srv), redistest.NewPath(t, srv)}
			gws := startFleet(t, srv, paths)
			for _, g := range gws {
				eventually.True(t, 10*time.Second, g.st.redis.FleetSeen, "a gateway did not see the fleet")
			}
			key := "bucket|/" + alg
			hammer(gws, p, key, 2, 30) // empties it
			// Each gateway hears from Redis that it is empty; the last
			// to hear it marks when it was (at most) empty.
			for _, g := range gws {
				for hammer([]*fleetGW{g}, p, key, 1, 1) != 0 {
				}
			}
			empty := time.Now()
			// A token comes back after 250ms: wait for two.
			time.Sleep(600 * time.Millisecond)
			for _, g := range gws {
				g.path.Cut()
			}
			// The requests that open the breakers are decided locally
			// too, and counted.
			var during int64
			for _, g := range gws {
				for !g.st.redis.CircuitOpen() {
					during += hammer([]*fleetGW{g}, p, key, 1, 1)
				}
			}
			// For 1.5s, a request every 5ms on each of four
			// connections: the fleet keeps to the bucket's refill.
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				during += hammer(gws, p, key, 4, 1)
			}
			refilled := int64(math.Ceil(4 * time.Since(empty).Seconds()))
			t.Logf("%s: admitted %d locally, %d tokens refilled since Redis said the bucket was empty", alg, during, refilled)
			if bound := refilled + int64(len(gws)); during > bound {
				t.Errorf("%s: the fleet admitted %d locally within %v of Redis saying the bucket was empty; want at most %d (what it refilled, and one per gateway)", alg, during, time.Since(empty).Round(time.Millisecond), bound)
			}
		})
	}
}
