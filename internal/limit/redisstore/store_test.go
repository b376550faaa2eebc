package redisstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// us0 is the tests' first instant in microseconds: 2025-01-01T00:00:00Z.
const us0 = int64(1_735_689_600_000_000)

// us returns n microseconds.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

func newTestRedis(t testing.TB, cfg Config) *Store {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// fixedClock is a Redis store's decision instant, in µs, for tests that
// step time instead of reading Redis's clock.
type fixedClock struct{ us atomic.Int64 }

// newFixedRedis returns a store on srv that decides at the instant c holds
// and has no deny cache (it runs on the real clock).
func newFixedRedis(t testing.TB, srv *redistest.Server) (*Store, *fixedClock) {
	t.Helper()
	// A generous timeout: a call slowed by a loaded machine must not
	// fail a test of what the store decides.
	r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Timeout: 10 * time.Second})
	c := &fixedClock{}
	c.us.Store(us0)
	r.fixedNow = c.us.Load
	return r, c
}

func TestNewRedis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "url", cfg: Config{URL: "redis://127.0.0.1:1/2"}},
		{name: "tls url with acl user", cfg: Config{URL: "rediss://gw:secret@redis.example:6380/0"}},
		{name: "cluster addrs", cfg: Config{Addrs: []string{"10.0.0.1:7000", " 10.0.0.2:7000"}, Cluster: true}},
		{name: "cluster url", cfg: Config{URL: "redis://10.0.0.1:7000", Cluster: true}},
		{name: "sentinel", cfg: Config{Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, SentinelMaster: "mymaster", Password: "x"}},
		{name: "url for credentials, addrs for nodes", cfg: Config{URL: "rediss://:pw@", Addrs: []string{"10.0.0.1:7000"}, Cluster: true}},
		{name: "no server", wantErr: "redis: no server: set a URL or addresses"},
		{name: "empty addrs", cfg: Config{Addrs: []string{" "}}, wantErr: "redis: no server: the address list is empty"},
		{name: "bad scheme", cfg: Config{URL: "http://x:1"}, wantErr: "redis url: redis: invalid URL scheme: http"},
		{name: "bad url hides password", cfg: Config{URL: "redis://u:hunter2@x:1/%zz"}, wantErr: `redis url: invalid URL escape "%zz"`},
		{name: "bad addr", cfg: Config{Addrs: []string{"redis.example"}}, wantErr: `redis address "redis.example": want host:port`},
		{name: "ipv6 addr", cfg: Config{Addrs: []string{"[::1]:6379"}}},
		{name: "ipv6 addr without brackets", cfg: Config{Addrs: []string{"::1:6379"}}, wantErr: `redis address "::1:6379": want host:port with an IPv6 host in brackets, like [::1]:6379`},
		{name: "port out of range", cfg: Config{Addrs: []string{"10.0.0.1:65536"}}, wantErr: `redis address "10.0.0.1:65536": want host:port with a port in 1..65535`},
		{name: "port not a number", cfg: Config{Addrs: []string{"10.0.0.1:redis"}}, wantErr: `redis address "10.0.0.1:redis": want host:port with a port in 1..65535`},
		{name: "several addrs without mode", cfg: Config{Addrs: []string{"a:1", "b:1"}}, wantErr: "redis: several addresses need cluster or a sentinel master"},
		{name: "cluster and sentinel", cfg: Config{URL: "redis://a:1", Cluster: true, SentinelMaster: "m"}, wantErr: "redis: cluster and sentinel are exclusive"},
		{name: "cluster db", cfg: Config{URL: "redis://a:1/3", Cluster: true}, wantErr: "redis: database 3: a cluster has only database 0"},
		{name: "negative timeout", cfg: Config{URL: "redis://a:1", Timeout: -1}, wantErr: "redis timeout -1ns is negative"},
		{name: "deny cache", cfg: Config{URL: "redis://a:1", DenyCacheSize: -2}, wantErr: "redis deny cache size -2 is below -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tt.cfg)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			} else {
				r.Close()
			}
			if gotErr != tt.wantErr {
				t.Errorf("New(%+v): got %q, want %q", tt.cfg, gotErr, tt.wantErr)
			}
			if strings.Contains(gotErr, "hunter2") {
				t.Errorf("the error shows the password: %q", gotErr)
			}
		})
	}
}

func TestRedisKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  limit.Request
		want string
	}{
		{name: "app rule", req: limit.Request{Key: "app-1|/v1/user"}, want: "gw:{app-1}:/v1/user"},
		{name: "app rule with tag", req: limit.Request{Key: "app-1|/v1/user", Tag: "app-1"}, want: "gw:{app-1}:/v1/user"},
		{name: "app total", req: limit.Request{Key: "app-1|"}, want: "gw:{app-1}:"},
		{name: "methods", req: limit.Request{Key: "app-1|/v1/user|GET,POST"}, want: "gw:{app-1}:/v1/user|GET,POST"},
		{name: "per ip", req: limit.Request{Key: "*|/|203.0.113.7", Tag: "*|203.0.113.7"}, want: "gw:{*|203.0.113.7}|*|/|203.0.113.7"},
		{name: "no separator", req: limit.Request{Key: "global"}, want: "gw:{global}|global"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := redisKey(redisTag(&tt.req), tt.req.Key); got != tt.want {
				t.Errorf("redis key of %+v: got %q, want %q", tt.req, got, tt.want)
			}
		})
	}
}

func TestRedisScriptHasEveryAlgorithm(t *testing.T) {
	t.Parallel()
	src, err := redisScript()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range limit.Algorithms() {
		a, _ := limit.Lookup(name)
		if _, ok := a.(limit.RedisAlgorithm); !ok {
			t.Errorf("%s has no Lua: the Redis store cannot run it", name)
		}
		if !strings.Contains(src, "A['"+name+"'] = ") {
			t.Errorf("the script lacks %s", name)
		}
	}
	if strings.Contains(src, luaPlaceholder) {
		t.Errorf("the script still has the placeholder")
	}
}

// TestRedisMultiLimitAtomic checks that a request is counted against all
// of its limits or none: a request that one limit denies consumes nothing
// from the others, on Redis's own clock.
func TestRedisMultiLimitAtomic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
			mk := func(lim int64) *limit.Params {
				p := &limit.Params{Algorithm: alg, Limit: lim, Window: quietWindow(time.Hour)}
				if alg == "sliding_window" {
					p.Precision = limit.DefaultPrecision
				}
				return p
			}
			app := "atomic-" + alg
			total := limit.Request{Key: app + "|", Params: mk(3)}
			one := limit.Request{Key: app + "|/one", Params: mk(1)}
			other := limit.Request{Key: app + "|/other", Params: mk(100)}
			beta := limit.Request{Key: app + "|/beta", Params: mk(1), Shadow: true}
			res := make([]limit.Result, 2)
			calls := []struct {
				reqs          []limit.Request
				want          bool
				wantRemaining []int64
			}{
				{reqs: []limit.Request{total, one}, want: true, wantRemaining: []int64{2, 0}},
				// /one denies: the total keeps its 2.
				{reqs: []limit.Request{total, one}, want: false, wantRemaining: []int64{2, 0}},
				{reqs: []limit.Request{total, one}, want: false, wantRemaining: []int64{2, 0}},
				{reqs: []limit.Request{total, other}, want: true, wantRemaining: []int64{1, 99}},
				// A shadow limit that denies does not deny, and is not counted.
				{reqs: []limit.Request{total, beta}, want: true, wantRemaining: []int64{0, 0}},
				{reqs: []limit.Request{total, beta}, want: false, wantRemaining: []int64{0, 0}},
				// The total denies: /other keeps its 99.
				{reqs: []limit.Request{total, other}, want: false, wantRemaining: []int64{0, 99}},
			}
			for i, c := range calls {
				got, err := red.Allow(context.Background(), time.Time{}, c.reqs, res)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.want {
					t.Errorf("call %d: allowed: got %v, want %v", i, got, c.want)
				}
				for j, want := range c.wantRemaining {
					if res[j].Remaining != want {
						t.Errorf("call %d: %s remaining: got %d, want %d", i, c.reqs[j].Key, res[j].Remaining, want)
					}
				}
			}
		})
	}
}

// TestRedisFleet runs three stores (three gateways) on one Redis, hammered
// concurrently on one key: together they admit exactly the limit. They
// decide at one fixed instant, so that no window boundary (where
// fixed_window admits up to twice the limit) falls within the test.
func TestRedisFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stores := make([]*Store, 3)
	for i := range stores {
		stores[i], _ = newFixedRedis(t, srv)
	}
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			p := &limit.Params{Algorithm: alg, Limit: 40, Window: time.Hour}
			if alg == "sliding_window" {
				p.Precision = limit.DefaultPrecision
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					store := stores[g%len(stores)]
					res := make([]limit.Result, 1)
					for range 25 {
						ok, err := store.Allow(context.Background(), time.Time{}, []limit.Request{{Key: "fleet|/" + alg, Params: p}}, res)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != p.Limit {
				t.Errorf("admitted by three gateways: got %d, want exactly %d", got, p.Limit)
			}
		})
	}
}

// TestRedisKeysExpire checks that every algorithm's keys vanish once they
// are idle, on Redis's clock.
func TestRedisKeysExpire(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
	ctx := context.Background()
	keys := map[string]bool{}
	for _, alg := range limit.Algorithms() {
		p := &limit.Params{Algorithm: alg, Limit: 2, Window: 150 * time.Millisecond}
		if alg == "sliding_window" {
			p.Precision = 3
		}
		if alg == "token_bucket" {
			p.Warmup = 100 * time.Millisecond
		}
		locked := *p
		locked.Lock = 200 * time.Millisecond
		res := make([]limit.Result, 1)
		for _, req := range []limit.Request{
			{Key: "exp|/" + alg, Params: p},
			{Key: "exp|/locked-" + alg, Params: &locked},
		} {
			for range 3 {
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{req}, res); err != nil {
					t.Fatal(err)
				}
			}
			k := redisKey(redisTag(&req), req.Key)
			// -2 (no key): a stall longer than the window (a busy
			// machine) let it expire already, which is what this test
			// checks; -1 (no TTL) is the failure.
			ttl, err := srv.Client().PTTL(ctx, k).Result()
			if err != nil || ttl != -2 && (ttl <= 0 || ttl > time.Second) {
				t.Errorf("%s: PTTL: got %v %v, want a TTL of about a window", k, ttl, err)
			}
			keys[k] = true
		}
	}
	eventually.True(t, 10*time.Second, func() bool {
		for k := range keys {
			if n, err := srv.Client().Exists(ctx, k).Result(); err == nil && n == 0 {
				delete(keys, k)
			}
		}
		return len(keys) == 0
	}, "keys still there after they went idle: %v", keys)
}

// TestRedisDenyCache checks that a key Redis denied until T is denied
// without a Redis call until T, with the headers' values Redis gave, and
// that only an enforced denial short-cuts Redis.
func TestRedisDenyCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := &struct {
		sync.Mutex
		t time.Time
	}{t: time.Now()}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second, Now: now})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_log", Limit: 2, Window: time.Hour}
	big := &limit.Params{Algorithm: "sliding_log", Limit: 100, Window: time.Hour}
	reqs := []limit.Request{{Key: "dc|", Params: big}, {Key: "dc|/v1", Params: p}}
	res := make([]limit.Result, 2)
	for range 2 {
		if ok, err := red.Allow(ctx, time.Time{}, reqs, res); !ok || err != nil {
			t.Fatalf("first two: got %v %v, want admitted", ok, err)
		}
	}
	calls := redistest.ScriptCalls(t, srv.Client())
	if ok, err := red.Allow(ctx, time.Time{}, reqs, res); ok || err != nil {
		t.Fatalf("third: got %v %v, want denied", ok, err)
	}
	first := slices.Clone(res)
	for i := range 100 {
		if i == 50 {
			clock.Lock()
			clock.t = clock.t.Add(time.Minute)
			clock.Unlock()
		}
		if ok, err := red.Allow(ctx, time.Time{}, reqs, res); ok || err != nil {
			t.Fatalf("denied caller: got %v %v, want denied", ok, err)
		}
	}
	if got := redistest.ScriptCalls(t, srv.Client()) - calls; got != 1 {
		t.Errorf("script calls for 101 denied requests: got %d, want 1", got)
	}
	if res[0].Remaining != first[0].Remaining || !res[0].Allowed {
		t.Errorf("the total from the cache: got %+v, want remaining %d", res[0], first[0].Remaining)
	}
	if want := first[1].RetryAfter - time.Minute; res[1].Allowed || res[1].RetryAfter > want || res[1].RetryAfter < want-time.Second {
		t.Errorf("the denial from the cache: got %+v, want retry after about %v", res[1], want)
	}

	// A denial that outlasts its Retry-After goes back to Redis.
	clock.Lock()
	clock.t = clock.t.Add(2 * time.Hour)
	clock.Unlock()
	calls = redistest.ScriptCalls(t, srv.Client())
	red.Allow(ctx, time.Time{}, reqs, res)
	if got := redistest.ScriptCalls(t, srv.Client()) - calls; got != 1 {
		t.Errorf("script calls after the denial's end: got %d, want 1", got)
	}

	// A shadow limit's denial never short-cuts Redis.
	shadow := []limit.Request{{Key: "dc2|", Params: big}, {Key: "dc2|/beta", Params: p, Shadow: true}}
	for range 3 {
		red.Allow(ctx, time.Time{}, shadow, res)
	}
	calls = redistest.ScriptCalls(t, srv.Client())
	for range 5 {
		if ok, err := red.Allow(ctx, time.Time{}, shadow, res); !ok || err != nil || res[1].Allowed {
			t.Fatalf("shadow denial: got %v %v %+v, want admitted with the shadow limit denying", ok, err, res[1])
		}
	}
	if got := redistest.ScriptCalls(t, srv.Client()) - calls; got != 5 {
		t.Errorf("script calls for 5 shadow-denied requests: got %d, want 5", got)
	}
}
