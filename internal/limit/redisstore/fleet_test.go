package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisFleetHealthy starts three gateways' stores at once on one
// healthy Redis and runs every algorithm 20 times in a row, each store
// under 10 concurrent callers: every run admits exactly the limit, no call
// fails (a healthy Redis is never decided by the fail mode), and no call
// waits for a dial or a free connection (Ready warmed the pools).
func TestRedisFleetHealthy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const gateways, workers, perWorker, runs = 3, 10, 2, 20
	stores := make([]*Store, gateways)
	for i := range stores {
		stores[i] = newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second})
		// One fixed instant: no window boundary falls within a run.
		stores[i].fixedNow = func() int64 { return us0 }
	}
	var wg sync.WaitGroup
	errs := make([]error, gateways)
	for i, st := range stores {
		wg.Go(func() { errs[i] = st.Ready(ctx) })
	}
	wg.Wait()
	misses := make([]uint32, gateways)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("gateway %d: Ready: %v", i, err)
		}
		misses[i] = stores[i].client.PoolStats().Misses
	}

	var failures atomic.Int64
	for run := range runs {
		for _, alg := range limit.Algorithms() {
			p := &limit.Params{Algorithm: alg, Limit: 7, Window: time.Hour}
			if alg == "sliding_window" {
				p.Precision = limit.DefaultPrecision
			}
			reqs := []limit.Request{{Key: fmt.Sprintf("healthy|/%s/%d", alg, run), Params: p}}
			var admitted atomic.Int64
			start := make(chan struct{})
			for g := range gateways * workers {
				wg.Go(func() {
					<-start
					store, res := stores[g%gateways], make([]limit.Result, 1)
					for range perWorker {
						ok, err := store.Allow(ctx, time.Time{}, reqs, res)
						switch {
						case err != nil:
							if failures.Add(1) == 1 {
								t.Errorf("run %d %s: store error: %v", run, alg, err)
							}
						case ok:
							admitted.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			if got := admitted.Load(); got != p.Limit {
				t.Errorf("run %d %s: admitted by three gateways: got %d, want exactly %d", run, alg, got, p.Limit)
			}
		}
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("store errors on a healthy Redis: got %d, want 0", n)
	}
	for i, st := range stores {
		s := st.client.PoolStats()
		if s.Timeouts != 0 || s.Misses != misses[i] {
			t.Errorf("gateway %d: pool timeouts %d and dials on the request path %d, want 0 and 0", i, s.Timeouts, s.Misses-misses[i])
		}
		if st.CircuitOpen() {
			t.Errorf("gateway %d: a breaker is open on a healthy Redis", i)
		}
	}
}

// TestRedisReady checks Ready: it fails, within the dial timeout, while
// Redis is down; once Redis is up it leaves warm connections and the
// script loaded; and a store that finds the script gone (a restart, a
// failover) loads it again in the background.
func TestRedisReady(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second, DialTimeout: 2 * time.Second, WarmConns: 4})
	ctx := context.Background()
	if err := red.Ready(ctx); err == nil {
		t.Fatal("Ready with Redis down: got nil, want an error")
	}
	srv.Restart()
	if err := red.Ready(ctx); err != nil {
		t.Fatalf("Ready with Redis up: %v", err)
	}
	if n := red.client.PoolStats().TotalConns; n < 4 {
		t.Errorf("connections after Ready: got %d, want at least 4", n)
	}
	loaded := func() bool {
		ok, err := srv.Client().ScriptExists(ctx, red.sha).Result()
		return err == nil && ok[0]
	}
	if !loaded() {
		t.Fatal("script not loaded after Ready")
	}

	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 5, Window: time.Hour}
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: "ready|/", Params: p}}, make([]limit.Result, 1)); err != nil {
		t.Fatalf("Allow after SCRIPT FLUSH: %v", err)
	}
	// EVAL caches the script as well; flush again so that only the
	// background warm-up can bring it back.
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	red.lastWarm.Store(0)
	red.rewarm()
	eventually.True(t, 10*time.Second, loaded, "the script was not loaded again in the background")
}

// TestRedisClusterNodeBreaker checks that the breakers are per node: in a
// three-master cluster, a master that hangs opens its own breaker only,
// and the keys of the other masters' slots keep being decided, with no
// error, meanwhile; once it is back, its keys are decided again.
func TestRedisClusterNodeBreaker(t *testing.T) {
	t.Parallel()
	// Without full coverage the other masters keep serving their slots
	// once the cluster sees the hung one fail.
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	var mu sync.Mutex
	changes := map[string][]bool{}
	red := newTestRedis(t, Config{
		Addrs: cl.Addrs(), Cluster: true, Timeout: 500 * time.Millisecond, DialTimeout: 10 * time.Second,
		OnNodeCircuitChange: func(node string, open bool) {
			mu.Lock()
			changes[node] = append(changes[node], open)
			mu.Unlock()
		},
	})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	cc := red.client.(*redis.ClusterClient)
	apps := map[string][]string{} // node → apps whose keys it serves
	for a := 0; a < 60; a++ {
		app := fmt.Sprintf("app-%d", a)
		node, err := cc.MasterForKey(ctx, redisKey(app, app+"|"))
		if err != nil {
			t.Fatal(err)
		}
		apps[node.Options().Addr] = append(apps[node.Options().Addr], app)
	}
	victim := cl.Nodes[0]
	if len(apps) != 3 || len(apps[victim.Addr]) == 0 {
		t.Fatalf("apps by node: %v, want some on each of the 3 nodes", apps)
	}
	p := &limit.Params{Algorithm: "token_bucket", Limit: 1000, Window: time.Hour}
	res := make([]limit.Result, 1)
	allow := func(app string) error {
		_, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: app + "|/", Params: p}}, res)
		return err
	}

	victim.Pause()
	for i := 0; !errors.Is(allow(apps[victim.Addr][0]), limit.ErrCircuitOpen); i++ {
		if i > 3*DefaultBreakerThreshold {
			t.Fatalf("the hung node's breaker did not open after %d calls", i)
		}
	}
	for node, as := range apps {
		if node == victim.Addr {
			continue
		}
		for _, app := range as {
			if err := allow(app); err != nil {
				t.Errorf("%s on healthy node %s while %s hangs: %v", app, node, victim.Addr, err)
			}
		}
	}
	for _, c := range red.Circuits() {
		if want := c.Node == victim.Addr; c.Open != want {
			t.Errorf("breaker of %s: open %v, want %v", c.Node, c.Open, want)
		}
	}

	victim.Resume()
	eventually.True(t, 20*time.Second, func() bool { return allow(apps[victim.Addr][0]) == nil },
		"the hung node's keys are not decided after it resumed")
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(changes); got != fmt.Sprintf("map[%s:[true false]]", victim.Addr) {
		t.Errorf("breaker changes: got %s, want the hung node's opening and closing only", got)
	}
}

// TestRedisFleetMembership checks the fleet's membership: each gateway's
// heartbeat counts the gateways, one that leaves is gone from the next
// count, and one that stops beating lapses.
func TestRedisFleetMembership(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	// Gateway 1's membership lapses 150ms after its one heartbeat; the
	// others' last half a minute, so that no pause of a loaded machine
	// makes them lapse while the test counts them. Gateway 1 registers
	// last: the count that includes it is taken in its own call.
	stores := make([]*Store, 3)
	for i, beat := range []time.Duration{10 * time.Second, 50 * time.Millisecond, 10 * time.Second} {
		stores[i] = newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second, FleetHeartbeat: beat})
		if stores[i].FleetSize() != 0 {
			t.Fatalf("fleet size before a heartbeat: got %d, want 0", stores[i].FleetSize())
		}
	}
	for want, i := range []int{0, 2, 1} {
		n, err := stores[i].Heartbeat(ctx)
		if err != nil || n != want+1 {
			t.Fatalf("gateway %d's heartbeat: got %d %v, want %d", i, n, err, want+1)
		}
	}
	// Gateway 0 runs its heartbeats and leaves; 1 stops beating; 2 asks.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { stores[0].RunFleet(rctx, nil); close(done) }()
	stop()
	<-done
	eventually.True(t, 10*time.Second, func() bool {
		n, err := stores[2].Heartbeat(ctx)
		return err == nil && n == 1
	}, "the fleet size never came down to 1 after one gateway left and one stopped beating: %d", stores[2].FleetSize())
	if got := stores[2].FleetSize(); got != 1 {
		t.Errorf("FleetSize: got %d, want 1", got)
	}

	// Through an outage the size stays what it was last seen.
	srv.Stop()
	if _, err := stores[2].Heartbeat(ctx); err == nil {
		t.Fatal("heartbeat with Redis down: got nil")
	}
	if got := stores[2].FleetSize(); got != 1 {
		t.Errorf("FleetSize through an outage: got %d, want the last seen 1", got)
	}
}

// TestRedisDenialsOutlastOutage checks that a denial Redis decided stays in
// force through an outage: the deny cache keeps answering it, without an
// error, while other requests fail.
func TestRedisDenialsOutlastOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
	ctx := context.Background()
	redistest.Ready(t, red)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 1, Window: quietWindow(time.Hour)}
	denied := []limit.Request{{Key: "outage|/", Params: p}}
	res := make([]limit.Result, 1)
	for i, want := range []bool{true, false} {
		if ok, err := red.Allow(ctx, time.Time{}, denied, res); ok != want || err != nil {
			t.Fatalf("call %d: got %v %v, want %v", i, ok, err, want)
		}
	}
	srv.Stop()
	for range 2 * DefaultBreakerThreshold {
		if ok, err := red.Allow(ctx, time.Time{}, denied, res); ok || err != nil || res[0].RetryAfter <= 0 {
			t.Fatalf("denied key with Redis down: got %v %v %+v, want denied by the cache", ok, err, res[0])
		}
	}
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: "outage|/other", Params: p}}, res); err == nil {
		t.Error("another key with Redis down: got nil, want an error")
	}
	if s := red.Stats(); s.Decisions != 2+2*DefaultBreakerThreshold || s.Calls != 3 {
		t.Errorf("stats: got %+v, want %d decisions and 3 calls", s, 2+2*DefaultBreakerThreshold)
	}
}

// TestRedisFull checks a Redis at maxmemory with noeviction: it refuses
// the script (OOM), and the store reports every such call as a failure,
// never as an admission; EvictionPolicy reports the nodes that would
// evict counters instead.
func TestRedisFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
	redistest.Ready(t, red)
	if m, err := red.EvictionPolicy(ctx); err != nil || len(m) != 0 {
		t.Errorf("EvictionPolicy with noeviction: got %v %v, want none", m, err)
	}
	// Fill Redis past a maxmemory set below what it holds.
	c := srv.Client()
	if err := c.Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 1)
	for i := range 3 * DefaultBreakerThreshold {
		ok, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: fmt.Sprintf("full|/%d", i), Params: p}}, res)
		if ok || err == nil {
			t.Fatalf("call %d on a full Redis: got %v %v, want an error and no admission", i, ok, err)
		}
		if i == 0 && !strings.Contains(err.Error(), "OOM") {
			t.Errorf("first call: got %v, want Redis's OOM", err)
		}
	}
	if !red.CircuitOpen() {
		t.Error("breaker closed after repeated OOM, want open")
	}

	evicting := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	red2 := newTestRedis(t, Config{URL: evicting.URL(), Timeout: time.Second})
	if m, err := red2.EvictionPolicy(ctx); err != nil || m[evicting.Addr] != "allkeys-lru" {
		t.Errorf("EvictionPolicy with allkeys-lru: got %v %v, want it reported", m, err)
	}
}
