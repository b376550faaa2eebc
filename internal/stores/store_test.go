package stores

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

var t0 = gwtest.T0

func TestLocalShareFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		bad            bool
	}{
		{name: "auto", in: "auto", want: "auto"},
		{name: "number", in: "0.25", want: "0.25"},
		{name: "whole", in: "1", want: "1"},
		{name: "zero", in: "0", bad: true},
		{name: "above one", in: "1.5", bad: true},
		{name: "word", in: "half", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s LocalShare = 0.5
			err := s.Set(tt.in)
			if (err != nil) != tt.bad {
				t.Fatalf("Set(%q): got %v, want error %v", tt.in, err, tt.bad)
			}
			if !tt.bad && s.String() != tt.want {
				t.Errorf("Set(%q): got %s, want %s", tt.in, s, tt.want)
			}
		})
	}
	if got := DefaultConfig(); got.LocalShare != 0 || got.FailMode != failmode.Local {
		t.Errorf("defaults: got --local-share %v --fail-mode %v, want auto and local", LocalShare(got.LocalShare), got.FailMode)
	}
}

// TestLocalShareAuto checks --local-share auto on a real Redis: with three
// gateways registered, the local store admits a third of each limit
// (rounded up), before any heartbeat the default share; and the store's
// metrics report the fleet, the node's breaker, the calls per decision and
// the callers past --redis-max-keys.
func TestLocalShareAuto(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := DefaultConfig()
	cfg.Store, cfg.RedisURL, cfg.RedisTimeout = StoreRedis, srv.URL(), time.Second
	// The database holds the fleet's registrations and counters before
	// the new callers below come: both are past a budget of one key.
	cfg.RedisMaxKeys = 1
	st, err := newStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	if _, ok := st.local.(*fleetShare); !ok {
		t.Fatalf("local store: got %T, want *fleetShare", st.local)
	}
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_log", Limit: 30, Window: time.Hour}
	admitted := func(key string) int {
		n := 0
		res := make([]limit.Result, 1)
		for range 40 {
			if ok, err := st.local.Allow(ctx, t0, []limit.Request{{Key: key, Params: p}}, res); err != nil {
				t.Fatal(err)
			} else if ok {
				n++
			}
		}
		return n
	}
	if got := admitted("before|/"); got != 3 {
		t.Errorf("before a heartbeat: admitted %d, want 30 × %v = 3", got, ruleset.DefaultLocalShare)
	}
	for _, id := range []string{"other-1", "other-2"} {
		other, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: time.Second, FleetID: id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		other.Close()
	}
	if n, err := st.redis.Heartbeat(ctx); err != nil || n != 3 {
		t.Fatalf("heartbeat: got %d %v, want 3", n, err)
	}
	// Gateways that start together may each find themselves alone at
	// their first heartbeat: until its second, a gateway takes at most
	// the default share.
	if got := admitted("three-first|/"); got != 3 {
		t.Errorf("fleet of 3 at the first heartbeat: admitted %d, want 30 × %v = 3", got, ruleset.DefaultLocalShare)
	}
	if n, err := st.redis.Heartbeat(ctx); err != nil || n != 3 {
		t.Fatalf("second heartbeat: got %d %v, want 3", n, err)
	}
	if got := admitted("three|/"); got != 10 {
		t.Errorf("fleet of 3: admitted %d, want 30 / 3 = 10", got)
	}
	// A counter Redis last said had 12 of 30 left: a third of 12.
	redistest.Ready(t, st.redis)
	charge := func(key string, n int64) {
		t.Helper()
		if _, err := st.redis.Allow(ctx, t0, []limit.Request{{Key: key, Params: p, Cost: n, Act: limit.Charge}}, make([]limit.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	charge("known|/", 18)
	if got := admitted("known|/"); got != 4 {
		t.Errorf("a counter Redis said had 12 left: admitted %d locally, want 12 / 3 = 4", got)
	}
	// A counter Redis last said was full: refused locally until its
	// reset, with Redis's wait.
	charge("full|/", 30)
	res := make([]limit.Result, 1)
	if got := admitted("full|/"); got != 0 {
		t.Errorf("a counter Redis said was full: admitted %d locally, want 0", got)
	}
	if _, err := st.local.Allow(ctx, t0, []limit.Request{{Key: "full|/", Params: p}}, res); err != nil || res[0].RetryAfter < 59*time.Minute {
		t.Errorf("a counter Redis said was full for an hour: Retry-After %v (%v), want about an hour", res[0].RetryAfter, err)
	}

	// Two charges above, and three calls below.
	reg := prometheus.NewRegistry()
	st.register(reg)
	redistest.Ready(t, st.redis)
	if _, err := st.redis.Allow(ctx, t0, []limit.Request{{Key: "m|/", Params: p}}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	// Two new callers of one bucket, both past the budget.
	tag, n := limit.CallerTag("10.0.0.0"), 0
	for i := 0; n < 2; i++ {
		ip := "10.0.0." + strconv.Itoa(i)
		if limit.CallerTag(ip) != tag {
			continue
		}
		n++
		q := limit.Request{Key: "*|/|" + ip, Overflow: "*|/|overflow", Tag: tag, Params: p}
		if _, err := st.redis.Allow(ctx, t0, []limit.Request{q}, make([]limit.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP gateway_redis_calls_total Script calls sent to Redis, failed ones included; / gateway_redis_decisions_total is the calls per decision.
# TYPE gateway_redis_calls_total counter
gateway_redis_calls_total 5
# HELP gateway_redis_decisions_total Requests the Redis store decided, by Redis or by its deny cache.
# TYPE gateway_redis_decisions_total counter
gateway_redis_decisions_total 5
# HELP gateway_redis_fleet_gateways Gateways registered in Redis at this gateway's last heartbeat (0 before the first); --local-share auto is 1 / this.
# TYPE gateway_redis_fleet_gateways gauge
gateway_redis_fleet_gateways 3
# HELP gateway_redis_node_circuit_open 1 while the circuit breaker of this Redis node is open: its keys are decided by --fail-mode.
# TYPE gateway_redis_node_circuit_open gauge
gateway_redis_node_circuit_open{node="` + srv.Addr + `"} 0
# HELP gateway_redis_overflow_total Requests of new callers that Redis counted against their rule's overflow counter because the Redis database held --redis-max-keys keys (every key of it, the node's on a Cluster).
# TYPE gateway_redis_overflow_total counter
gateway_redis_overflow_total 2
# HELP gateway_redis_round_trips_total Round trips to Redis that carried script calls; fewer than gateway_redis_calls_total when calls were batched (--redis-batch).
# TYPE gateway_redis_round_trips_total counter
gateway_redis_round_trips_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gateway_redis_calls_total", "gateway_redis_decisions_total",
		"gateway_redis_fleet_gateways", "gateway_redis_node_circuit_open", "gateway_redis_round_trips_total", "gateway_redis_overflow_total"); err != nil {
		t.Error(err)
	}
}

// TestRedisLayoutFlag checks --redis-layout: string by default, hash
// accepted, anything else refused with the values it takes.
func TestRedisLayoutFlag(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if cfg.RedisLayout != redisstore.LayoutString {
		t.Errorf("default --redis-layout %q, want %q", cfg.RedisLayout, redisstore.LayoutString)
	}
	for _, tt := range []struct {
		layout string
		bad    bool
	}{{"string", false}, {"hash", false}, {"list", true}, {"", true}} {
		cfg := DefaultConfig()
		cfg.RedisLayout = tt.layout
		err := cfg.Validate()
		if (err != nil) != tt.bad || (tt.bad && !strings.Contains(err.Error(), "--redis-layout")) {
			t.Errorf("--redis-layout %q: %v, want an error %v", tt.layout, err, tt.bad)
		}
	}
}

// TestReadyPingBounded checks that /readyz's ping of a Redis that does
// not answer gives up within readyPing, not after --redis-dial-timeout
// (here 30s) and --redis-timeout: a Kubernetes probe waits 1s by
// default, and a gateway that serves without Redis (--fail-mode local,
// open) must answer ready in time, one that cannot (closed) not ready.
func TestReadyPingBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, mode := range []failmode.Mode{failmode.Local, failmode.Open, failmode.Closed} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			path := redistest.NewPath(t, srv)
			cfg := DefaultConfig()
			cfg.Store, cfg.RedisURL, cfg.FailMode, cfg.RedisDialTimeout = StoreRedis, path.URL(), mode, 30*time.Second
			st, err := newStore(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.close() })
			redistest.Ready(t, st.redis)
			if h := st.health(context.Background()); !h.Reachable || !h.Serving {
				t.Fatalf("before the stall: %+v, want reachable and serving", h)
			}
			path.SetDelay(func() time.Duration { return time.Minute })
			start := time.Now()
			h := st.health(context.Background())
			// Far above readyPing, far below the 30s the ping had before.
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("health took %v with Redis not answering; want it to give up after %v", took.Round(time.Millisecond), readyPing)
			}
			if h.Reachable || h.Error == "" || h.Serving != (mode != failmode.Closed) {
				t.Errorf("with Redis not answering: %+v, want unreachable with why, serving %v", h, mode != failmode.Closed)
			}
		})
	}
}

// TestReadyClusterMasterDown stops one master of a 3-master cluster
// without replicas, under --fail-mode closed: /readyz's report of the
// store must be the same on every probe, whichever node go-redis would
// pick, and follow the rule (docs/operations.md, "Admin port"): Redis is
// reachable while a master answers, serving, and the report names the
// master that does not.
func TestReadyClusterMasterDown(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	cfg := DefaultConfig()
	cfg.Store, cfg.RedisAddrs, cfg.RedisCluster, cfg.FailMode = StoreRedis, cl.Addrs(), true, failmode.Closed
	// Generous bounds: a loaded machine must not fail a ping of a master
	// that is up.
	cfg.RedisTimeout, cfg.RedisDialTimeout = 5*time.Second, 10*time.Second
	st, err := newStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	redistest.Ready(t, st.redis)
	ctx := context.Background()
	if h := st.health(ctx); !h.Reachable || !h.Serving || h.Error != "" {
		t.Fatalf("every master up: %+v, want reachable and serving, without an error", h)
	}

	dead := cl.Masters()[0]
	dead.Stop()
	var served []bool
	for i := range 20 {
		h := st.health(ctx)
		served = append(served, h.Serving)
		if !h.Reachable || !h.Serving || !strings.Contains(h.Error, dead.Addr) {
			t.Errorf("probe %d with master %s down: %+v, want reachable and serving, with an error that names it", i+1, dead.Addr, h)
		}
		for _, s := range cl.Nodes {
			if s != dead && strings.Contains(h.Error, s.Addr) {
				t.Errorf("probe %d: the error names %s, which is up: %s", i+1, s.Addr, h.Error)
			}
		}
	}
	if slices.Contains(served, false) && slices.Contains(served, true) {
		t.Errorf("serving, probe by probe, with one master down: %v, want the same answer every time", served)
	}

	for _, s := range cl.Nodes {
		s.Stop()
	}
	if h := st.health(ctx); h.Reachable || h.Serving || h.Error == "" {
		t.Errorf("every master down: %+v, want unreachable, not serving, with why", h)
	}
}

// TestLevelConcurrently levels one full bucket from eight requests at
// once: it ends holding the level, not in debt (each charging all it held
// above the level would leave it refusing for seconds).
func TestLevelConcurrently(t *testing.T) {
	t.Parallel()
	p := &limit.Params{Algorithm: "token_bucket", Limit: 4, Window: time.Second, Burst: 40}
	for round := range 50 {
		mem, err := limit.NewMemory(limit.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		f := &fleetShare{mem: mem}
		now := time.Now()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				if err := f.level(context.Background(), now, &limit.Request{Key: "k", Params: p}, 1); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		res := make([]limit.Result, 1)
		if _, err := mem.Allow(context.Background(), now, []limit.Request{{Key: "k", Params: p, Act: limit.Read}}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Remaining != 1 || res[0].Over != 0 {
			t.Fatalf("round %d: levelled to 1 from eight requests at once, the bucket holds %d, over by %d", round, res[0].Remaining, res[0].Over)
		}
	}
}

// TestCloseLogsDroppedWriteBacks closes the stores while Redis, stopped,
// has not counted requests admitted locally: the last flush cannot send
// their write-backs, and the log says how many were dropped (the metric
// goes with the process).
func TestCloseLogsDroppedWriteBacks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	logs := &gwtest.Log{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	cfg := DefaultConfig()
	cfg.Store, cfg.RedisURL, cfg.Logger = StoreRedis, srv.URL(), log
	cfg.RedisTimeout, cfg.RedisMaxTimeout, cfg.RedisDialTimeout, cfg.RedisPoolTimeout = 50*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
	st, err := newStore(cfg, func(bool) {})
	if err != nil {
		t.Fatal(err)
	}
	fo, err := failmode.New(failmode.Config{Mode: failmode.Local, Store: st.store, Local: st.local, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Ready(t, st.redis)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
	srv.Pause()
	defer srv.Resume()
	local := 0
	for range 20 {
		reqs, res := []limit.Request{{Key: "closing|/", Params: p}}, make([]limit.Result, 1)
		if ok, v, _ := fo.Allow(context.Background(), time.Now(), reqs, res, func(int) *limit.Params { return p }); ok && v != failmode.StoreDecided {
			local++
		}
	}
	if local == 0 || !st.redis.CircuitOpen() {
		t.Fatalf("admitted %d locally, breaker open %v: want requests admitted locally behind an open breaker", local, st.redis.CircuitOpen())
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); !strings.Contains(got, "write-backs it may not have counted were dropped") {
		t.Errorf("the log says nothing of the write-backs dropped at Close:\n%s", got)
	}
}
