package rls

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// newRedis returns a Redis store on srv with test timeouts: generous, so
// that a loaded machine does not fail a call.
func newRedis(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	return newRedisDeny(t, srv, 0)
}

// newRedisDeny is newRedis with a deny cache of the given size (-1: none).
func newRedisDeny(t *testing.T, srv *redistest.Server, denyCache int) *redisstore.Store {
	t.Helper()
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), DenyCacheSize: denyCache, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second, PoolTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	return red
}

// TestShouldRateLimitRedis runs the protocol's semantics on a real
// redis-server. Redis keeps the time, so every step is within one
// minute-long sliding window.
func TestShouldRateLimitRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		denyCache int
		steps     []step
	}{
		{"key without value: a counter per value", 0, []step{
			{0, "rl", "foo=a", 0, ok, []string{"ok/1/2"}},
			{0, "rl", "foo=a", 0, ok, []string{"ok/0/2"}},
			{0, "rl", "foo=a", 0, over, []string{"over/0/2"}},
			{0, "rl", "foo=b", 0, ok, []string{"ok/1/2"}},
		}},
		// The Redis store's deny cache remembers a denial whatever its
		// cost, so that a smaller request after a larger denied one is
		// denied locally until the larger one would fit: it is off here
		// until it keys denials by cost (docs/rls.md, "Known limits").
		{"hits_addend", -1, []step{
			{0, "ext", "cost=1", 3, ok, []string{"ok/2/5"}},
			{0, "ext", "cost=1", 3, over, []string{"over/0/5"}},
			{0, "ext", "cost=1", 2, ok, []string{"ok/0/5"}},
		}},
		{"per-descriptor hits_addend, 0 checks only", 0, []step{
			{0, "ext", "cost=3+4", 0, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=3+0", 0, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=3+1", 0, ok, []string{"ok/0/5"}},
			{0, "ext", "cost=3+0", 0, over, []string{"over/0/5"}},
		}},
		{"several descriptors all or nothing", 0, []step{
			{0, "ext", "pair=a;pair=b", 0, ok, []string{"ok/4/5", "ok/0/1"}},
			{0, "ext", "pair=a;pair=b", 0, over, []string{"ok/4/5", "over/0/1"}},
			{0, "ext", "pair=a", 0, ok, []string{"ok/3/5"}},
		}},
		{"shadow mode", 0, []step{
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/2/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/1/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/0/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/0/3"}},
		}},
		{"unknown domain and descriptor", 0, []step{
			{0, "nosuchdomain", "foo=x", 0, ok, []string{"ok/-/-"}},
			{0, "rl", "nothing=1;foo=u", 0, ok, []string{"ok/-/-", "ok/1/2"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Client().FlushAll(t.Context())
			run(t, newHarness(t, Config{Store: newRedisDeny(t, srv, tc.denyCache), FailMode: failmode.Closed}), tc.steps)
		})
	}
}

// TestFailModesRedisStopped stops a real Redis under the service.
func TestFailModesRedisStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mode  failmode.Mode
		steps []step
	}{
		{"open", failmode.Open, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
		}},
		{"closed", failmode.Closed, []step{
			{0, "ext", "pair=a", 0, over, []string{"over/0/5"}},
		}},
		{"local", failmode.Local, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
			{0, "ext", "pair=b", 0, over, []string{"over/0/1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cfg := Config{Store: newRedis(t, srv), FailMode: tc.mode}
			if tc.mode == failmode.Local {
				mem, err := limit.NewMemory(limit.MemoryConfig{})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Local = mem
			}
			h := newHarness(t, cfg)
			// Redis answers first.
			if resp := h.call(t, "ext", "cost=1", 0); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 4 {
				t.Fatalf("with redis: got %v", resp)
			}
			srv.Stop()
			run(t, h, tc.steps)
		})
	}
}

// TestFleetNeverOverLimit runs three services, each with its own Redis
// store (its own leases and deny cache), on one redis-server, with
// concurrent calls for one hot value: with leases (the default) they
// never admit more than the limit together, and without them exactly the
// limit.
func TestFleetNeverOverLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		leases int
	}{{"leases", 0}, {"no leases", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Client().FlushAll(t.Context())
			var fleet []*harness
			for range 3 {
				red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Leases: tc.leases, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second, PoolTimeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { red.Close() })
				fleet = append(fleet, newHarness(t, Config{Store: red, FailMode: failmode.Closed}))
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for _, h := range fleet {
				for range 8 {
					wg.Go(func() {
						for range 40 {
							// detailed: 100 a minute.
							if h.call(t, "ext", "detailed=fleet", 0).OverallCode == ok {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			got := admitted.Load()
			switch {
			case got > 100:
				t.Errorf("the fleet admitted %d of 960, more than the limit of 100", got)
			case tc.leases < 0 && got != 100:
				t.Errorf("without leases the fleet admitted %d of 960, want exactly 100", got)
			case got == 0:
				t.Errorf("the fleet admitted nothing")
			}
			// With leases, tokens leased to one service and unspent are
			// room the others lack, so a burst may get less than the limit.
			t.Logf("admitted %d of 960 (limit 100)", got)
		})
	}
}

// TestReferenceCountingRedis counts as envoyproxy/ratelimit does on a
// real redis-server: each descriptor on its own, the hits over a limit
// counted. Its fixed windows (a day's, ending at midnight UTC) are
// counted at the harness's instants, not at Redis's time: a run across
// midnight would count its last steps afresh.
func TestReferenceCountingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var h *harness
	cfg := redisstoretest.WithDecisionClock(redisstore.Config{URL: srv.URL(), DenyCacheSize: -1, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second, PoolTimeout: 5 * time.Second},
		func() time.Time { return t0.Add(time.Duration(h.now.Load())) })
	red, err := redisstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	h = newHarness(t, Config{Store: red, FailMode: failmode.Closed, ReferenceCounting: true})
	c, err := rlsconfig.Parse("day.yaml", []byte("domain: day\ndescriptors:\n  - key: cost\n    rate_limit: {unit: day, requests_per_unit: 5}\n  - key: one\n    rate_limit: {unit: day, requests_per_unit: 1}\n"), rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.svc.SetConfig(c)
	run(t, h, []step{
		{0, "day", "cost=a", 4, ok, []string{"ok/1/5"}},
		{0, "day", "cost=a", 3, over, []string{"over/0/5"}},
		// 7 counted: 1 more is over too.
		{0, "day", "cost=a", 1, over, []string{"over/0/5"}},
		{0, "day", "one=a;cost=b", 0, ok, []string{"ok/0/1", "ok/4/5"}},
		// one=a denies, cost=b still counts.
		{0, "day", "one=a;cost=b", 0, over, []string{"over/0/1", "ok/3/5"}},
	})
}
