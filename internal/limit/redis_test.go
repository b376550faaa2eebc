package limit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// us0 is the tests' first instant in microseconds: 2025-01-01T00:00:00Z.
const us0 = int64(1_735_689_600_000_000)

// us returns n microseconds.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

func newTestRedis(t testing.TB, cfg RedisConfig) *Redis {
	t.Helper()
	r, err := NewRedis(cfg)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// fixedClock is a Redis store's decision instant, in µs, for tests that
// step time instead of reading Redis's clock.
type fixedClock struct{ us atomic.Int64 }

// newFixedRedis returns a store on srv that decides at the instant c holds
// and has no deny cache (it runs on the real clock).
func newFixedRedis(t testing.TB, srv *redistest.Server) (*Redis, *fixedClock) {
	t.Helper()
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), DenyCacheSize: -1, Timeout: time.Second})
	c := &fixedClock{}
	c.us.Store(us0)
	r.fixedNow = c.us.Load
	return r, c
}

func TestNewRedis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     RedisConfig
		wantErr string
	}{
		{name: "url", cfg: RedisConfig{URL: "redis://127.0.0.1:1/2"}},
		{name: "tls url with acl user", cfg: RedisConfig{URL: "rediss://gw:secret@redis.example:6380/0"}},
		{name: "cluster addrs", cfg: RedisConfig{Addrs: []string{"10.0.0.1:7000", " 10.0.0.2:7000"}, Cluster: true}},
		{name: "cluster url", cfg: RedisConfig{URL: "redis://10.0.0.1:7000", Cluster: true}},
		{name: "sentinel", cfg: RedisConfig{Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, SentinelMaster: "mymaster", Password: "x"}},
		{name: "url for credentials, addrs for nodes", cfg: RedisConfig{URL: "rediss://:pw@", Addrs: []string{"10.0.0.1:7000"}, Cluster: true}},
		{name: "no server", wantErr: "redis: no server: set a URL or addresses"},
		{name: "empty addrs", cfg: RedisConfig{Addrs: []string{" "}}, wantErr: "redis: no server: the address list is empty"},
		{name: "bad scheme", cfg: RedisConfig{URL: "http://x:1"}, wantErr: "redis url: redis: invalid URL scheme: http"},
		{name: "bad url hides password", cfg: RedisConfig{URL: "redis://u:hunter2@x:1/%zz"}, wantErr: `redis url: invalid URL escape "%zz"`},
		{name: "bad addr", cfg: RedisConfig{Addrs: []string{"redis.example"}}, wantErr: `redis address "redis.example": want host:port`},
		{name: "ipv6 addr", cfg: RedisConfig{Addrs: []string{"[::1]:6379"}}},
		{name: "ipv6 addr without brackets", cfg: RedisConfig{Addrs: []string{"::1:6379"}}, wantErr: `redis address "::1:6379": want host:port with an IPv6 host in brackets, like [::1]:6379`},
		{name: "port out of range", cfg: RedisConfig{Addrs: []string{"10.0.0.1:65536"}}, wantErr: `redis address "10.0.0.1:65536": want host:port with a port in 1..65535`},
		{name: "port not a number", cfg: RedisConfig{Addrs: []string{"10.0.0.1:redis"}}, wantErr: `redis address "10.0.0.1:redis": want host:port with a port in 1..65535`},
		{name: "several addrs without mode", cfg: RedisConfig{Addrs: []string{"a:1", "b:1"}}, wantErr: "redis: several addresses need cluster or a sentinel master"},
		{name: "cluster and sentinel", cfg: RedisConfig{URL: "redis://a:1", Cluster: true, SentinelMaster: "m"}, wantErr: "redis: cluster and sentinel are exclusive"},
		{name: "cluster db", cfg: RedisConfig{URL: "redis://a:1/3", Cluster: true}, wantErr: "redis: database 3: a cluster has only database 0"},
		{name: "negative timeout", cfg: RedisConfig{URL: "redis://a:1", Timeout: -1}, wantErr: "redis timeout -1ns is negative"},
		{name: "deny cache", cfg: RedisConfig{URL: "redis://a:1", DenyCacheSize: -2}, wantErr: "redis deny cache size -2 is below -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewRedis(tt.cfg)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			} else {
				r.Close()
			}
			if gotErr != tt.wantErr {
				t.Errorf("NewRedis(%+v): got %q, want %q", tt.cfg, gotErr, tt.wantErr)
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
		req  Request
		want string
	}{
		{name: "app rule", req: Request{Key: "app-1|/v1/user"}, want: "gw:{app-1}:/v1/user"},
		{name: "app rule with tag", req: Request{Key: "app-1|/v1/user", Tag: "app-1"}, want: "gw:{app-1}:/v1/user"},
		{name: "app total", req: Request{Key: "app-1|"}, want: "gw:{app-1}:"},
		{name: "methods", req: Request{Key: "app-1|/v1/user|GET,POST"}, want: "gw:{app-1}:/v1/user|GET,POST"},
		{name: "per ip", req: Request{Key: "*|/|203.0.113.7", Tag: "*|203.0.113.7"}, want: "gw:{*|203.0.113.7}|*|/|203.0.113.7"},
		{name: "no separator", req: Request{Key: "global"}, want: "gw:{global}|global"},
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
	for _, name := range Algorithms() {
		a, _ := Lookup(name)
		if _, ok := a.(RedisAlgorithm); !ok {
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

// redisParams returns random valid Params of alg whose durations are whole
// microseconds (the Redis store's resolution), and whose sliding-window
// buckets are whole microseconds too, so that both stores count in the
// same buckets. Sometimes the limit is 0 or -1 and sometimes there is a
// lockout.
func redisParams(rng *rand.Rand, alg string) *Params {
	p := &Params{Algorithm: alg, Limit: 1 + rng.Int64N(12)}
	switch alg {
	case "sliding_window":
		p.Precision = 1 + rng.IntN(12)
		p.Window = us(int64(p.Precision) * (1 + rng.Int64N(200_000)))
	default:
		p.Window = us([]int64{1 + rng.Int64N(50), 1 + rng.Int64N(3_000_000), 1_000_000}[rng.IntN(3)])
	}
	if (alg == "token_bucket" || alg == "leaky_bucket") && rng.IntN(2) == 0 {
		p.Burst = 1 + rng.Int64N(3*p.Limit)
	}
	switch rng.IntN(15) {
	case 0:
		p.Limit = 0
	case 1:
		p.Limit = Unlimited
	}
	if rng.IntN(3) == 0 {
		p.Lock = us(1 + rng.Int64N(2_000_000))
	}
	return p
}

// redisSeeds is the number of random sequences per algorithm.
var redisSeeds = 8

// nearUp reports whether red is mem rounded up to a whole microsecond, as
// the Redis store's times are, give or take slack more microseconds.
func nearUp(mem, red time.Duration, slack int) bool {
	return red >= mem && red < mem+time.Duration(1+slack)*time.Microsecond
}

// TestRedisMatchesMemory runs the same random sequences of requests —
// an app total and two rules, some shadow, some with lockouts, limits of
// 0 and -1, reloads that change a limit (counts kept) or a shape (counts
// reset) — through the memory store and the Redis store at the same
// instants (sometimes stepping back), and checks that they decide alike:
// the same admissions, the same Remaining, and Reset and RetryAfter equal
// up to Redis's microseconds. The memory store's answers are proven right by its own
// tests, so this carries its guarantees over to Redis. Before the
// random sequences come the step tables of uncountedCases, whose limits
// admit requests that are not counted; on both, storePair also checks
// each store's Reset of every limit that did not count a request. The
// store calls its function library (FCALL).
func TestRedisMatchesMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			if err := red.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !red.fn.on.Load() {
				t.Fatal("the store does not call the function library (FCALL)")
			}
			for i, c := range uncountedCases() {
				if c.alg != alg {
					continue
				}
				app := fmt.Sprintf("%s-uncounted-%d", alg, i)
				pair := newStorePair(t, red, clock)
				for j, call := range c.calls {
					reqs := renameApp(call.reqs, app)
					pair.allow(us0+int64(call.at/time.Microsecond), reqs, func() string {
						return fmt.Sprintf("%s call %d", c.name, j)
					})
				}
			}
			for seed := range redisSeeds {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(len(alg))))
				compareStores(t, red, clock, rng, alg, fmt.Sprintf("%s-%d", alg, seed), false)
			}
		})
	}
}

// TestRedisMatchesMemoryCosts is TestRedisMatchesMemory with costs:
// requests of several units up to the limit's capacity, deferred ones
// (Request.Defer) and charges (Request.Charge) of up to twice the
// capacity, which take limits past their limit; and with the script
// sent as such (EVALSHA), as to a Redis before 7.
func TestRedisMatchesMemoryCosts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			// The store's script as a script (EVALSHA), where
			// TestRedisMatchesMemory runs it as a function (FCALL).
			red.fn.off = true
			red.fn.on.Store(false)
			for seed := range redisSeeds {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(len(alg))+100))
				compareStores(t, red, clock, rng, alg, fmt.Sprintf("%s-cost-%d", alg, seed), true)
			}
		})
	}
}

// renameApp returns reqs with the "app" that their keys start with
// replaced by app.
func renameApp(reqs []Request, app string) []Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Key = app + strings.TrimPrefix(out[i].Key, "app")
	}
	return out
}

// compareStores runs one random sequence through both stores; with
// costs, its requests have costs and some are deferred or charges.
func compareStores(t *testing.T, red *Redis, clock *fixedClock, rng *rand.Rand, alg, app string, costs bool) {
	t.Helper()
	pair := newStorePair(t, red, clock)
	keys := []string{app + "|", app + "|/a", app + "|/b"}
	params := make([]*Params, len(keys))
	shadow := make([]bool, len(keys))
	for i := range keys {
		params[i] = redisParams(rng, alg)
		shadow[i] = rng.IntN(4) == 0
	}
	shapes := [][]int{{0, 1}, {0, 2}, {1}, {2}, {0}, {1, 2}}
	now := us0 + rng.Int64N(1_000_000)
	for step := range 250 {
		switch rng.IntN(7) {
		case 0: // the same instant
		case 1:
			now += pair.retry
		case 2:
			now += 1 + rng.Int64N(3)
		case 3:
			// Redis's clock stepped back (a failover to a server whose
			// clock is behind).
			now -= rng.Int64N(int64(params[rng.IntN(len(params))].Window/time.Microsecond) + 1)
		default:
			w := int64(params[rng.IntN(len(params))].Window / time.Microsecond)
			now += rng.Int64N(w/2 + 1)
		}
		what := ""
		if rng.IntN(30) == 0 {
			// A reload: a new limit keeps the counts, a new shape resets
			// them, and either may add or drop a lockout.
			i := rng.IntN(len(params))
			q := *params[i]
			if rng.IntN(2) == 0 {
				q.Limit = redisParams(rng, alg).Limit
				what = fmt.Sprintf("limit of %s to %d", keys[i], q.Limit)
			} else {
				q = *redisParams(rng, alg)
				what = fmt.Sprintf("%s to %+v", keys[i], q)
			}
			if err := q.Validate(); err == nil {
				params[i] = &q
			}
		}
		shape := shapes[rng.IntN(len(shapes))]
		reqs := make([]Request, len(shape))
		for j, i := range shape {
			reqs[j] = Request{Key: keys[i], Params: params[i], Shadow: shadow[i]}
			if costs {
				c := max(params[i].Capacity(), 1)
				switch rng.IntN(10) {
				case 0, 1, 2:
					reqs[j].Charge, reqs[j].Cost = true, 1+rng.Int64N(2*c)
				case 3, 4:
					reqs[j].Defer, reqs[j].Cost = true, 1+rng.Int64N(c)
				default:
					reqs[j].Cost = 1 + rng.Int64N(c)
				}
			}
		}
		pair.allow(now, reqs, func() string { return fmt.Sprintf("%s step %d (reload: %q)", app, step, what) })
	}
}

// storePair is a memory store and a Redis store that decide the same
// requests at the same instants. Its allow checks that they agree, and,
// in each store, that a limit that does not count a request gives the
// Reset of its state without it: the time until the instant at which it
// was to be fully replenished when it last counted a request (now plus
// that Reset), or, if later, until the end of its lockout, which
// storePair tracks as the stores do.
type storePair struct {
	t     *testing.T
	mem   *Memory
	red   *Redis
	clock *fixedClock
	keys  map[string]*pairKey
	// retry is the longest RetryAfter of the last allow, in µs.
	retry int64
}

// pairKey is what a storePair knows of one key.
type pairKey struct {
	params Params
	// rescaled counts the limit changes of a bucket since its shape last
	// changed: each rounds its instants up to the new limit's fraction of
	// a nanosecond in memory but of a microsecond in Redis, so Redis's
	// Reset may run up to a microsecond later per change.
	rescaled int
	// memFull (ns) and redFull (µs) are when each store's state is to be
	// fully replenished, as of the last request counted; 0 when none was
	// counted since the state was created.
	memFull, redFull int64
	// lockedUntil is the end of the key's lockout in µs, 0 for none.
	lockedUntil int64
	// unknown reports whether memFull and redFull are not known: a charge
	// during a lockout reports the lockout's end, not the state's.
	unknown bool
}

func newStorePair(t *testing.T, red *Redis, clock *fixedClock) *storePair {
	return &storePair{t: t, mem: newTestMemory(t, MemoryConfig{}), red: red, clock: clock, keys: map[string]*pairKey{}}
}

// allow decides reqs at now (µs) in both stores and checks the answers;
// where names the call in failures.
func (sp *storePair) allow(now int64, reqs []Request, where func() string) {
	t := sp.t
	t.Helper()
	ctx := context.Background()
	mres, rres := make([]Result, len(reqs)), make([]Result, len(reqs))
	mok, err := sp.mem.Allow(ctx, time.Unix(0, now*1000), reqs, mres)
	if err != nil {
		t.Fatalf("%s: memory: %v", where(), err)
	}
	sp.clock.us.Store(now)
	rok, err := sp.red.Allow(ctx, time.Time{}, reqs, rres)
	if err != nil {
		t.Fatalf("%s: redis: %v", where(), err)
	}
	describe := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s at +%dµs:", where(), now-us0)
		for j := range reqs {
			fmt.Fprintf(&b, "\n  %s %+v shadow=%v cost=%d defer=%v charge=%v\n    memory %+v\n    redis  %+v",
				reqs[j].Key, *reqs[j].Params, reqs[j].Shadow, reqs[j].Cost, reqs[j].Defer, reqs[j].Charge, mres[j], rres[j])
		}
		return b.String()
	}
	if mok != rok {
		t.Fatalf("allowed: got %v, want %v\n%s", rok, mok, describe())
	}
	sp.retry = 0
	for j := range reqs {
		q, m, r := &reqs[j], mres[j], rres[j]
		p := q.Params
		k := sp.keys[q.Key]
		switch {
		case k == nil:
			k = &pairKey{}
			sp.keys[q.Key] = k
		case k.params == *p:
		case k.params.Identity(p):
			k.rescaled++
		default:
			k.rescaled, k.memFull, k.redFull, k.unknown = 0, 0, 0, false
		}
		k.params = *p
		if p.Lock == 0 {
			k.lockedUntil = 0 // a reload lifted the lockout
		}
		if m.Allowed != r.Allowed || m.Limit != r.Limit || m.Remaining != r.Remaining ||
			!nearUp(m.Reset, r.Reset, k.rescaled) || !nearUp(m.RetryAfter, r.RetryAfter, k.rescaled) {
			t.Fatalf("results differ\n%s", describe())
		}
		sp.retry = max(sp.retry, int64(r.RetryAfter/time.Microsecond))
		if !r.Allowed && !q.Shadow && !q.Charge && p.Lock > 0 && k.lockedUntil <= now {
			k.lockedUntil = now + int64(p.Lock/time.Microsecond)
		}
		if p.Limit <= 0 {
			continue // no state: Reset is 0, or a window for a blocked limit
		}
		if q.Charge {
			// Counted: the Reset is the state's time to full, unless a
			// lockout's end hides it.
			k.unknown = k.lockedUntil > now
			k.memFull, k.redFull = now*1000+int64(m.Reset), now+int64(r.Reset/time.Microsecond)
			continue
		}
		if mok && r.Allowed && !q.Defer {
			k.memFull, k.redFull, k.unknown = now*1000+int64(m.Reset), now+int64(r.Reset/time.Microsecond), false
			continue
		}
		if k.unknown {
			continue
		}
		// Not counted: the state's own time to full, or the lockout's.
		memWant := max(k.memFull-now*1000, (k.lockedUntil-now)*1000, 0)
		redWant := max(k.redFull-now, k.lockedUntil-now, 0)
		if int64(m.Reset) != memWant || int64(r.Reset/time.Microsecond) != redWant {
			t.Fatalf("%s: reset of the uncounted state: got %v in memory, %v in redis; want %v, %v\n%s",
				q.Key, m.Reset, r.Reset, time.Duration(memWant), us(redWant), describe())
		}
	}
}

// TestRedisUncounted runs uncountedCases through the Redis store: the
// same results, in whole microseconds.
func TestRedisUncounted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for i, tt := range uncountedCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			app := fmt.Sprintf("uncounted-%d", i)
			for j, c := range tt.calls {
				reqs := renameApp(c.reqs, app)
				res := make([]Result, len(reqs))
				clock.us.Store(us0 + int64(c.at/time.Microsecond))
				got, err := red.Allow(context.Background(), time.Time{}, reqs, res)
				if err != nil {
					t.Fatalf("call %d (t0%+v): %v", j, c.at, err)
				}
				if got != c.want {
					t.Errorf("call %d (t0%+v): allowed: got %v, want %v", j, c.at, got, c.want)
				}
				for k, r := range res {
					w := c.res[k]
					if r.Allowed != w.Allowed || r.Limit != w.Limit || r.Remaining != w.Remaining ||
						!nearUp(w.Reset, r.Reset, 0) || !nearUp(w.RetryAfter, r.RetryAfter, 0) {
						t.Errorf("call %d (t0%+v) %s: got %+v, want %+v (times rounded up to µs)", j, c.at, reqs[k].Key, r, w)
					}
				}
			}
		})
	}
}

// TestRedisWarmupSteps checks token_bucket's warm-up in Lua on the step
// tables of TestTokenBucketWarmupSteps, in microseconds: Guava's
// example, whose costs round to whole microseconds (546.666ms, not
// 546.666666ms, since G rounds up and the cost is a difference of G's),
// and a cold burst, whose numbers are round.
func TestRedisWarmupSteps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ms = 1000 // µs
	tests := []struct {
		name  string
		p     *Params
		steps []redisStep
	}{
		{
			name: "Guava SmoothWarmingUp",
			p:    &Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 1, Warmup: 1500 * time.Millisecond},
			steps: []redisStep{
				{at: 0, allow: true, remaining: 0, reset: 546666},
				{at: 546665, retryAfter: 1, reset: 1},
				{at: 546666, allow: true, remaining: 0, reset: 440 * ms},
				{at: 986666, allow: true, remaining: 0, reset: 333334},
				{at: 1320 * ms, allow: true, remaining: 0, reset: 230 * ms},
				{at: 1550 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 1750 * ms, allow: true, remaining: 0, reset: 200 * ms},
				{at: 3150 * ms, allow: true, remaining: 0, reset: 546666},
			},
		},
		{
			name: "a cold burst",
			p:    &Params{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 10, Warmup: time.Second},
			steps: []redisStep{
				{at: 0, allow: true, remaining: 4, reset: 280 * ms},
				{at: 0, allow: true, remaining: 3, reset: 520 * ms},
				{at: 0, allow: true, remaining: 2, reset: 720 * ms},
				{at: 0, allow: true, remaining: 1, reset: 880 * ms},
				{at: 0, allow: true, remaining: 0, reset: 1000 * ms},
				{at: 0, retryAfter: 100 * ms, reset: 1000 * ms},
				{at: 100 * ms, allow: true, remaining: 0, reset: 1000 * ms},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			runRedisSteps(t, red, clock, "warm|/"+tt.name, tt.p, tt.steps)
		})
	}
}

// redisStep is one request of a Redis step table, in µs from us0.
type redisStep struct {
	at                int64
	allow             bool
	remaining         int64
	retryAfter, reset int64
}

// runRedisSteps runs steps against key and reports the step that fails.
func runRedisSteps(t *testing.T, red *Redis, clock *fixedClock, key string, p *Params, steps []redisStep) {
	t.Helper()
	res := make([]Result, 1)
	for i, s := range steps {
		clock.us.Store(us0 + s.at)
		if _, err := red.Allow(context.Background(), time.Time{}, []Request{{Key: key, Params: p}}, res); err != nil {
			t.Fatal(err)
		}
		want := Result{Allowed: s.allow, Limit: p.Limit, Remaining: s.remaining, RetryAfter: us(s.retryAfter), Reset: us(s.reset)}
		if res[0] != want {
			t.Errorf("step %d (+%dµs): got %+v, want %+v", i, s.at, res[0], want)
		}
	}
}

// TestRedisGuarantees checks the guarantee of every algorithm (the
// docs/algorithms.md, "Algorithms" table)
// against real Redis: random arrivals, bunched on the edges where
// algorithms slip, are offered to one key in order, and the admitted
// instants must keep the guarantee.
func TestRedisGuarantees(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			ctx := context.Background()
			for seed := range 6 {
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				p := redisParams(rng, alg)
				p.Limit, p.Lock = 1+rng.Int64N(10), 0
				if p.Burst > 3*p.Limit {
					p.Burst = 3 * p.Limit
				}
				if alg == "token_bucket" && rng.IntN(2) == 0 {
					p.Warmup = p.Window
				}
				if err := p.Validate(); err != nil {
					t.Fatalf("%+v: %v", *p, err)
				}
				key := fmt.Sprintf("g%d|/%s", seed, alg)
				start := us0 + rng.Int64N(1_000_000)
				var admitted, denied []int64
				res := make([]Result, 1)
				for _, at := range arrivals(rng, p, start, time.Microsecond) {
					clock.us.Store(at)
					ok, err := red.Allow(ctx, time.Time{}, []Request{{Key: key, Params: p}}, res)
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						admitted = append(admitted, at)
					} else {
						denied = append(denied, at)
					}
				}
				if len(admitted) == 0 {
					t.Fatalf("%+v: nothing admitted", *p)
				}
				if err := checkGuarantee(p, admitted, denied); err != nil {
					t.Errorf("%+v: %v", *p, err)
				}
			}
		})
	}
}

// checkGuarantee checks the admitted and denied instants (µs, sorted) of
// one key against p's guarantee (docs/algorithms.md, "Algorithms" table).
func checkGuarantee(p *Params, admitted, denied []int64) error {
	w, l := micros(p.Window), int(p.Limit)
	switch p.Algorithm {
	case "sliding_window", "sliding_log":
		// No closed interval of length Window holds more than Limit.
		for i := 0; i+l < len(admitted); i++ {
			if admitted[i+l]-admitted[i] <= w {
				return fmt.Errorf("%d admitted in [%d, %d], within one window", l+1, admitted[i], admitted[i+l])
			}
		}
		if p.Algorithm == "sliding_log" {
			// Exact: a request is denied only when the interval ending at
			// it holds Limit.
			for _, d := range denied {
				lo, _ := slices.BinarySearch(admitted, d-w)
				hi, _ := slices.BinarySearch(admitted, d+1)
				if hi-lo != l {
					return fmt.Errorf("denied at %d with %d admitted in [%d, %d]", d, hi-lo, d-w, d)
				}
			}
		}
	case "fixed_window":
		count := map[int64]int{}
		for _, a := range admitted {
			if count[floorDiv(a, w)]++; count[floorDiv(a, w)] > l {
				return fmt.Errorf("more than %d admitted in window %d", l, floorDiv(a, w))
			}
		}
	default:
		ns := make([]int64, len(admitted))
		for i, a := range admitted {
			ns[i] = (a - us0) * 1000
		}
		return rateBound(ns, capacity(p), p)
	}
	return nil
}

// TestRedisSlidingWindowSteadyStream checks the other half of
// sliding_window's guarantee on Redis: a steady stream above the limit
// still gets Limit·P/(P+1) per window in the long run.
func TestRedisSlidingWindowSteadyStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	p := &Params{Algorithm: "sliding_window", Limit: 20, Window: time.Second, Precision: 4}
	const windows = 20
	res := make([]Result, 1)
	admitted := 0
	for at := us0; at < us0+windows*1_000_000; at += 1_000_000 / 60 { // three times the limit
		clock.us.Store(at)
		ok, err := red.Allow(context.Background(), time.Time{}, []Request{{Key: "steady|/", Params: p}}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if want := windows * 20 * 4 / 5; admitted < want-20 || admitted > windows*20 {
		t.Errorf("admitted over %d windows: got %d, want about %d (at most %d)", windows, admitted, want, windows*20)
	}
}

// TestRedisMultiLimitAtomic checks that a request is counted against all
// of its limits or none: a request that one limit denies consumes nothing
// from the others, on Redis's own clock.
func TestRedisMultiLimitAtomic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second})
			mk := func(limit int64) *Params {
				p := &Params{Algorithm: alg, Limit: limit, Window: time.Hour}
				if alg == "sliding_window" {
					p.Precision = DefaultPrecision
				}
				return p
			}
			app := "atomic-" + alg
			total := Request{Key: app + "|", Params: mk(3)}
			one := Request{Key: app + "|/one", Params: mk(1)}
			other := Request{Key: app + "|/other", Params: mk(100)}
			beta := Request{Key: app + "|/beta", Params: mk(1), Shadow: true}
			res := make([]Result, 2)
			calls := []struct {
				reqs          []Request
				want          bool
				wantRemaining []int64
			}{
				{reqs: []Request{total, one}, want: true, wantRemaining: []int64{2, 0}},
				// /one denies: the total keeps its 2.
				{reqs: []Request{total, one}, want: false, wantRemaining: []int64{2, 0}},
				{reqs: []Request{total, one}, want: false, wantRemaining: []int64{2, 0}},
				{reqs: []Request{total, other}, want: true, wantRemaining: []int64{1, 99}},
				// A shadow limit that denies does not deny, and is not counted.
				{reqs: []Request{total, beta}, want: true, wantRemaining: []int64{0, 0}},
				{reqs: []Request{total, beta}, want: false, wantRemaining: []int64{0, 0}},
				// The total denies: /other keeps its 99.
				{reqs: []Request{total, other}, want: false, wantRemaining: []int64{0, 99}},
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
	stores := make([]*Redis, 3)
	for i := range stores {
		stores[i], _ = newFixedRedis(t, srv)
	}
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			p := &Params{Algorithm: alg, Limit: 40, Window: time.Hour}
			if alg == "sliding_window" {
				p.Precision = DefaultPrecision
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					store := stores[g%len(stores)]
					res := make([]Result, 1)
					for range 25 {
						ok, err := store.Allow(context.Background(), time.Time{}, []Request{{Key: "fleet|/" + alg, Params: p}}, res)
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
	red := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second})
	ctx := context.Background()
	keys := map[string]bool{}
	for _, alg := range Algorithms() {
		p := &Params{Algorithm: alg, Limit: 2, Window: 150 * time.Millisecond}
		if alg == "sliding_window" {
			p.Precision = 3
		}
		if alg == "token_bucket" {
			p.Warmup = 100 * time.Millisecond
		}
		locked := *p
		locked.Lock = 200 * time.Millisecond
		res := make([]Result, 1)
		for _, req := range []Request{
			{Key: "exp|/" + alg, Params: p},
			{Key: "exp|/locked-" + alg, Params: &locked},
		} {
			for range 3 {
				if _, err := red.Allow(ctx, time.Time{}, []Request{req}, res); err != nil {
					t.Fatal(err)
				}
			}
			k := redisKey(redisTag(&req), req.Key)
			ttl, err := srv.Client().PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 || ttl > time.Second {
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

// TestRedisNoScript checks that the store survives Redis losing its script
// cache and its function library (SCRIPT FLUSH, FUNCTION FLUSH, a
// restart): EVALSHA fails with NOSCRIPT, or FCALL with "Function not
// found", and the store falls back to EVAL.
func TestRedisNoScript(t *testing.T) {
	t.Parallel()
	for _, functions := range []bool{true, false} {
		t.Run(fmt.Sprintf("functions=%v", functions), func(t *testing.T) {
			t.Parallel()
			testRedisNoScript(t, functions)
		})
	}
}

func testRedisNoScript(t *testing.T, functions bool) {
	srv := redistest.Start(t)
	red := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second})
	red.fn.off = !functions
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if got := red.fn.on.Load(); got != functions {
		t.Fatalf("FCALL in use after Ready: got %v, want %v", got, functions)
	}
	p := &Params{Algorithm: "sliding_log", Limit: 3, Window: time.Hour}
	res := make([]Result, 1)
	for i, want := range []bool{true, true, true, false} {
		if i == 2 {
			if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Client().FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := red.Allow(ctx, time.Time{}, []Request{{Key: "noscript|/", Params: p}}, res)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got != want {
			t.Errorf("call %d: allowed: got %v, want %v", i, got, want)
		}
	}
	// Ready loaded the script: only the call after the flush needs EVAL.
	stats := srv.Info("commandstats")
	if calls := stats["cmdstat_eval"]; !strings.Contains(calls, "calls=1,") {
		t.Errorf("EVAL stats: got %q, want 1 call (the one after the flush)", calls)
	}
	// The other calls are FCALL with the library, EVALSHA without (Ready
	// checks the library with one FCALL of its own).
	want, none := "cmdstat_fcall", "cmdstat_evalsha"
	if !functions {
		want, none = none, want
	}
	if calls := stats[want]; calls == "" {
		t.Errorf("%s: no calls", want)
	}
	// With the library, the calls after the flush may be EVALSHA until
	// the background warm-up has loaded it again.
	if calls := stats[none]; !functions && calls != "" {
		t.Errorf("%s: got %q, want no calls", none, calls)
	}
}

// TestRedisSlowIsATimeout checks that a Redis that answers slowly fails
// the call after the timeout rather than holding it.
func TestRedisSlowIsATimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A test's timeout, not the production 25ms: well above what a
	// loaded machine takes to answer, well below the 5s sleep.
	red := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	p := &Params{Algorithm: "fixed_window", Limit: 100, Window: time.Hour}
	reqs := []Request{{Key: "slow|/", Params: p}}
	res := make([]Result, 1)
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
		t.Fatal(err)
	}
	sleeping := make(chan error, 1)
	go func() { sleeping <- srv.Client().Do(ctx, "DEBUG", "SLEEP", "5").Err() }()
	// Wait until the server is asleep: a PING of another client hangs.
	eventually.True(t, 10*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return red.client.Ping(pctx).Err() != nil
	}, "Redis did not go to sleep")
	start := time.Now()
	_, err := red.Allow(ctx, time.Time{}, reqs, res)
	took := time.Since(start)
	var nerr net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &nerr) && nerr.Timeout()) {
		t.Errorf("Allow while Redis sleeps: got %v, want a timeout", err)
	}
	// A timeout error is the proof it did not wait for Redis, which
	// would have answered after its sleep.
	t.Logf("Allow while Redis sleeps returned after %v", took)
	if err := <-sleeping; err != nil {
		t.Fatal(err)
	}
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
		t.Errorf("Allow after Redis woke up: %v", err)
	}
}

// TestRedisDownAtStart checks that the store can be created while Redis
// is down, fails its calls, opens its breaker, and uses Redis by itself
// once it comes.
func TestRedisDownAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	var opened, closed atomic.Int32
	red := newTestRedis(t, RedisConfig{URL: srv.URL(), OnCircuitChange: func(open bool) {
		if open {
			opened.Add(1)
		} else {
			closed.Add(1)
		}
	}})
	ctx := context.Background()
	p := &Params{Algorithm: "token_bucket", Limit: 100, Window: time.Hour}
	reqs := []Request{{Key: "down|/", Params: p}}
	res := make([]Result, 1)
	for range DefaultBreakerThreshold {
		if _, err := red.Allow(ctx, time.Time{}, reqs, res); err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Allow with Redis down: got %v, want a connection error", err)
		}
	}
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Allow after %d failures: got %v, want ErrCircuitOpen", DefaultBreakerThreshold, err)
	}
	if !red.CircuitOpen() || opened.Load() != 1 {
		t.Errorf("breaker: open %v after %d opens, want open after 1", red.CircuitOpen(), opened.Load())
	}
	if err := red.Ping(ctx); err == nil {
		t.Errorf("Ping with Redis down: got nil")
	}

	srv.Restart()
	eventually.True(t, 10*time.Second, func() bool {
		_, err := red.Allow(ctx, time.Time{}, reqs, res)
		return err == nil
	}, "Allow never succeeded after Redis came back")
	if red.CircuitOpen() || closed.Load() != 1 {
		t.Errorf("breaker: open %v after %d closes, want closed after 1", red.CircuitOpen(), closed.Load())
	}
	if err := red.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
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
	red := newTestRedis(t, RedisConfig{URL: srv.URL(), Timeout: time.Second, Now: now})
	ctx := context.Background()
	p := &Params{Algorithm: "sliding_log", Limit: 2, Window: time.Hour}
	big := &Params{Algorithm: "sliding_log", Limit: 100, Window: time.Hour}
	reqs := []Request{{Key: "dc|", Params: big}, {Key: "dc|/v1", Params: p}}
	res := make([]Result, 2)
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
	shadow := []Request{{Key: "dc2|", Params: big}, {Key: "dc2|/beta", Params: p, Shadow: true}}
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

// TestRedisCluster checks the store on a three-node Redis Cluster: the keys
// of many apps spread over the nodes' slots, each request's keys share its
// app's slot, and every limit holds.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	red := newTestRedis(t, RedisConfig{Addrs: cl.Addrs(), Cluster: true, Timeout: 2 * time.Second})
	ctx := context.Background()
	total := &Params{Algorithm: "sliding_window", Limit: 5, Window: time.Hour, Precision: 10}
	rule := &Params{Algorithm: "token_bucket", Limit: 3, Window: time.Hour}
	other := &Params{Algorithm: "sliding_log", Limit: 10, Window: time.Hour}
	res := make([]Result, 2)
	const apps = 24
	for a := range apps {
		app := fmt.Sprintf("app-%d", a)
		admitted := 0
		for range 6 {
			ok, err := red.Allow(ctx, time.Time{}, []Request{{Key: app + "|", Params: total}, {Key: app + "|/rule", Params: rule}}, res)
			if err != nil {
				t.Fatalf("%s: %v", app, err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%s /rule: admitted %d, want 3", app, admitted)
		}
		admitted = 0
		for range 6 {
			ok, err := red.Allow(ctx, time.Time{}, []Request{{Key: app + "|", Params: total}, {Key: app + "|/other", Params: other}}, res)
			if err != nil {
				t.Fatalf("%s: %v", app, err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != 2 {
			t.Errorf("%s /other: admitted %d, want the 2 left of the total", app, admitted)
		}
	}
	spread := 0
	for _, n := range cl.Nodes {
		if size, err := n.Client().DBSize(ctx).Result(); err == nil && size > 0 {
			spread++
		}
	}
	if spread < 2 {
		t.Errorf("keys on %d of 3 nodes, want them spread", spread)
	}
}

// TestRedisSentinel checks the store behind Redis Sentinel: it asks the
// Sentinel for the master and limits there.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "gw-master")
	red := newTestRedis(t, RedisConfig{Addrs: []string{sentinel.Addr}, SentinelMaster: "gw-master", Timeout: 2 * time.Second})
	p := &Params{Algorithm: "sliding_window", Limit: 3, Window: time.Hour, Precision: 10}
	res := make([]Result, 1)
	admitted := 0
	for range 5 {
		ok, err := red.Allow(context.Background(), time.Time{}, []Request{{Key: "sentinel|/", Params: p}}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted through Sentinel: got %d, want 3", admitted)
	}
	if n, err := master.Client().Exists(context.Background(), "gw:{sentinel}:/").Result(); err != nil || n != 1 {
		t.Errorf("the master's key: got %d %v, want it there", n, err)
	}
}

// BenchmarkRedisAllow measures decisions per second against a local Redis,
// one goroutine and many, for one limit and for an app total with a rule.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	p := &Params{Algorithm: "sliding_window", Limit: MaxLimit, Window: time.Second, Precision: DefaultPrecision}
	for _, tt := range []struct {
		name string
		reqs []Request
	}{
		{name: "one limit", reqs: []Request{{Key: "bench|/v1/user", Params: p}}},
		{name: "app total and API", reqs: []Request{{Key: "bench|", Params: p}, {Key: "bench|/v1/user", Params: p}}},
	} {
		red := newTestRedis(b, RedisConfig{URL: srv.URL(), Timeout: time.Second})
		ctx := context.Background()
		b.Run(tt.name+"/serial", func(b *testing.B) {
			res := make([]Result, len(tt.reqs))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := red.Allow(ctx, time.Time{}, tt.reqs, res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(tt.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				res := make([]Result, len(tt.reqs))
				for pb.Next() {
					if _, err := red.Allow(ctx, time.Time{}, tt.reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkRedisAlgorithms measures decisions per second of each
// algorithm's script against a local Redis, from 8 goroutines, at the
// largest limit every algorithm takes (sliding_log's MaxLogLimit) per
// second: a mix of admitted and denied decisions.
func BenchmarkRedisAlgorithms(b *testing.B) {
	srv := redistest.Start(b)
	// No deny cache: every decision is a script call.
	red := newTestRedis(b, RedisConfig{URL: srv.URL(), Timeout: time.Second, DenyCacheSize: -1})
	ctx := context.Background()
	for _, c := range algCases(MaxLogLimit) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				reqs := []Request{{Key: "bench|/" + c.name, Params: c.p}}
				res := make([]Result, 1)
				for pb.Next() {
					if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkRedisDenied measures a caller that keeps asking while denied,
// with the deny cache and without: the Redis calls per denied request.
func BenchmarkRedisDenied(b *testing.B) {
	srv := redistest.Start(b)
	p := &Params{Algorithm: "sliding_window", Limit: 1, Window: time.Hour, Precision: DefaultPrecision}
	for _, tt := range []struct {
		name string
		size int
	}{
		{name: "deny cache", size: 0},
		{name: "no deny cache", size: -1},
	} {
		b.Run(tt.name, func(b *testing.B) {
			red := newTestRedis(b, RedisConfig{URL: srv.URL(), Timeout: time.Second, DenyCacheSize: tt.size})
			ctx := context.Background()
			reqs := []Request{{Key: "denied|/" + tt.name, Params: p}}
			res := make([]Result, 1)
			red.Allow(ctx, time.Time{}, reqs, res)
			calls := redistest.ScriptCalls(b, srv.Client())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]Result, 1)
				for pb.Next() {
					if ok, err := red.Allow(ctx, time.Time{}, reqs, res); ok || err != nil {
						b.Errorf("got %v %v, want denied", ok, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(redistest.ScriptCalls(b, srv.Client())-calls)/float64(b.N), "redis-calls/op")
		})
	}
}
