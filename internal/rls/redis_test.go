package rls

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// newRedis returns a Redis store on srv with test timeouts: generous, so
// that a loaded machine does not fail a call.
func newRedis(t *testing.T, srv *redistest.Server) *limit.Redis {
	t.Helper()
	return newRedisDeny(t, srv, 0)
}

// newRedisDeny is newRedis with a deny cache of the given size (-1: none).
func newRedisDeny(t *testing.T, srv *redistest.Server, denyCache int) *limit.Redis {
	t.Helper()
	red, err := limit.NewRedis(limit.RedisConfig{URL: srv.URL(), DenyCacheSize: denyCache, Timeout: 5 * time.Second, DialTimeout: 5 * time.Second, PoolTimeout: 5 * time.Second})
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
			run(t, newHarness(t, Config{Store: newRedisDeny(t, srv, tc.denyCache), FailMode: proxy.FailClosed}), tc.steps)
		})
	}
}

// TestFailModesRedisStopped stops a real Redis under the service.
func TestFailModesRedisStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mode  proxy.FailMode
		steps []step
	}{
		{"open", proxy.FailOpen, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
		}},
		{"closed", proxy.FailClosed, []step{
			{0, "ext", "pair=a", 0, over, []string{"over/0/5"}},
		}},
		{"local", proxy.FailLocal, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
			{0, "ext", "pair=b", 0, over, []string{"over/0/1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cfg := Config{Store: newRedis(t, srv), FailMode: tc.mode}
			if tc.mode == proxy.FailLocal {
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
