package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// redisParams returns random valid Params of alg whose durations are whole
// microseconds (the Redis store's resolution), and whose sliding-window
// buckets are whole microseconds too, so that both stores count in the
// same buckets. Sometimes the limit is 0 or -1 and sometimes there is a
// lockout.
func redisParams(rng *rand.Rand, alg string) *limit.Params {
	p := &limit.Params{Algorithm: alg, Limit: 1 + rng.Int64N(12)}
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
		p.Limit = limit.Unlimited
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
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			redistest.Ready(t, red)
			if !red.fn.on.Load() {
				t.Fatal("the store does not call the function library (FCALL)")
			}
			for i, c := range limittest.UncountedCases() {
				if c.Alg != alg {
					continue
				}
				app := fmt.Sprintf("%s-uncounted-%d", alg, i)
				pair := newStorePair(t, red, clock)
				for j, call := range c.Calls {
					reqs := renameApp(call.Reqs, app)
					pair.allow(us0+int64(call.At/time.Microsecond), reqs, func() string {
						return fmt.Sprintf("%s call %d", c.Name, j)
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
// (limit.Defer) and charges (limit.Charge) of up to twice the
// capacity, which take limits past their limit; and with the script
// sent as such (EVALSHA), as to a Redis before 7.
func TestRedisMatchesMemoryCosts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range limit.Algorithms() {
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
func renameApp(reqs []limit.Request, app string) []limit.Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Key = app + strings.TrimPrefix(out[i].Key, "app")
	}
	return out
}

// compareStores runs one random sequence through both stores; with
// costs, its requests have costs and some are deferred or charges.
func compareStores(t *testing.T, red *Store, clock *fixedClock, rng *rand.Rand, alg, app string, costs bool) {
	t.Helper()
	pair := newStorePair(t, red, clock)
	keys := []string{app + "|", app + "|/a", app + "|/b"}
	params := make([]*limit.Params, len(keys))
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
		reqs := make([]limit.Request, len(shape))
		for j, i := range shape {
			reqs[j] = limit.Request{Key: keys[i], Params: params[i], Shadow: shadow[i]}
			if costs {
				c := max(params[i].Capacity(), 1)
				switch rng.IntN(10) {
				case 0, 1, 2:
					reqs[j].Act, reqs[j].Cost = limit.Charge, 1+rng.Int64N(2*c)
				case 3, 4:
					reqs[j].Act, reqs[j].Cost = limit.Defer, 1+rng.Int64N(c)
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
	mem   *limit.Memory
	red   *Store
	clock *fixedClock
	keys  map[string]*pairKey
	// retry is the longest RetryAfter of the last allow, in µs.
	retry int64
}

// pairKey is what a storePair knows of one key.
type pairKey struct {
	params limit.Params
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

func newStorePair(t *testing.T, red *Store, clock *fixedClock) *storePair {
	return &storePair{t: t, mem: newTestMemory(t), red: red, clock: clock, keys: map[string]*pairKey{}}
}

// allow decides reqs at now (µs) in both stores and checks the answers;
// where names the call in failures.
func (sp *storePair) allow(now int64, reqs []limit.Request, where func() string) {
	t := sp.t
	t.Helper()
	ctx := context.Background()
	mres, rres := make([]limit.Result, len(reqs)), make([]limit.Result, len(reqs))
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
			fmt.Fprintf(&b, "\n  %s %+v shadow=%v cost=%d act=%v\n    memory %+v\n    redis  %+v",
				reqs[j].Key, *reqs[j].Params, reqs[j].Shadow, reqs[j].Cost, reqs[j].Act, mres[j], rres[j])
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
		if !r.Allowed && !q.Shadow && q.Act != limit.Charge && p.Lock > 0 && k.lockedUntil <= now {
			k.lockedUntil = now + int64(p.Lock/time.Microsecond)
		}
		if p.Limit <= 0 {
			continue // no state: Reset is 0, or a window for a blocked limit
		}
		if q.Act == limit.Charge {
			// Counted: the Reset is the state's time to full, unless a
			// lockout's end hides it.
			k.unknown = k.lockedUntil > now
			k.memFull, k.redFull = now*1000+int64(m.Reset), now+int64(r.Reset/time.Microsecond)
			continue
		}
		if mok && r.Allowed && q.Act != limit.Defer {
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
	for i, tt := range limittest.UncountedCases() {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			app := fmt.Sprintf("uncounted-%d", i)
			for j, c := range tt.Calls {
				reqs := renameApp(c.Reqs, app)
				res := make([]limit.Result, len(reqs))
				clock.us.Store(us0 + int64(c.At/time.Microsecond))
				got, err := red.Allow(context.Background(), time.Time{}, reqs, res)
				if err != nil {
					t.Fatalf("call %d (t0%+v): %v", j, c.At, err)
				}
				if got != c.Want {
					t.Errorf("call %d (t0%+v): allowed: got %v, want %v", j, c.At, got, c.Want)
				}
				for k, r := range res {
					w := c.Res[k]
					if r.Allowed != w.Allowed || r.Limit != w.Limit || r.Remaining != w.Remaining ||
						!nearUp(w.Reset, r.Reset, 0) || !nearUp(w.RetryAfter, r.RetryAfter, 0) {
						t.Errorf("call %d (t0%+v) %s: got %+v, want %+v (times rounded up to µs)", j, c.At, reqs[k].Key, r, w)
					}
				}
			}
		})
	}
}
