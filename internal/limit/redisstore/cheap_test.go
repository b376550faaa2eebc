package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// Tests of the cheaper decisions of the Redis store: what a usual call
// reads and writes (the string layout, redis_state.lua), the copy of a
// new key in a batch (again, redis_decide.lua), a batch's replies as strings (many),
// sliding_window's shortcuts for a total of 1 (sliding_window.lua) and
// the lease that is asked for only past one request per leaseAhead
// (scriptArgs).

// rawCall returns the script's arguments for the request q decided alone
// with the call argument call in place of the usual one, and its key.
func rawCall(t *testing.T, red *Store, q limit.Request, call string) ([]string, []any) {
	t.Helper()
	reqs := []limit.Request{q}
	keys, tag, _, err := redisKeys(reqs)
	if err != nil {
		t.Fatal(err)
	}
	args := red.scriptArgs(time.Time{}, reqs, tag, nil)
	args[2] = call
	return keys, args
}

// refillAndReturn leases tokens of q's key at the fixed instant now (µs)
// as a call that only asks for the next lease does (every token leased,
// none counted for a request), and gives every one of them back, as a
// gateway does once it stops using them (lease_return.lua). The counter
// is then as it was, but its head bucket may be empty.
func refillAndReturn(t *testing.T, red *Store, clock *fixedClock, q limit.Request, now int64) {
	t.Helper()
	clock.us.Store(now)
	keys, args := rawCall(t, red, q, "1 - 0 -100000 1 0")
	v, err := red.run(context.Background(), keys, args)
	if err != nil || len(v) != 10 {
		t.Fatalf("refill at +%dµs: %v %v", now-us0, v, err)
	}
	if v[0] != 1 {
		return // the window is full: nothing counted
	}
	if v[5] < 1 {
		t.Fatalf("refill at +%dµs leased %d tokens, want some", now-us0, v[5])
	}
	red.giveBack([]leaseReturn{{key: keys[0], params: *q.Params, bucket: v[7], n: v[5]}})
}

// checkRing fails t unless key's sliding_window counter's total is the
// sum of its buckets, and returns the counter's fields.
func checkRing(t *testing.T, srv *redistest.Server, key string, where string) map[string]string {
	t.Helper()
	h := counterFields(t, srv.Client(), key)
	total, _ := strconv.ParseInt(h["t"], 10, 64)
	sum := int64(0)
	for f, v := range h {
		if strings.HasPrefix(f, "_") || f == "t" || f == "h" {
			continue
		}
		c, _ := strconv.ParseInt(v, 10, 64)
		sum += c
	}
	if sum != total {
		t.Fatalf("%s: the buckets hold %d, the total t is %d: %v", where, sum, total, h)
	}
	return h
}

// TestRedisSlidingWindowLeaseGivenBack checks sliding_window's shortcuts
// for a total of 1 on a counter whose one count is not in its head
// bucket: a lease counted in a newer bucket and given back in full leaves
// the head bucket empty and the count in an older one. A lease given back
// in full must change no later decision: the stores decide the usual
// requests alike (storePair) whatever leases came and went between them.
func TestRedisSlidingWindowLeaseGivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sec := int64(time.Second / time.Microsecond)
	p := &limit.Params{Algorithm: "sliding_window", Limit: 2, Window: 10 * time.Second, Precision: 10}
	// The ring has 11 buckets of 1s; us0 starts one.
	for _, tt := range []struct {
		name string
		// steps are the instants (s from us0) of the usual requests;
		// lease is the instant of the lease given back, after the first.
		steps []int64
		lease int64
	}{
		// The count at 0 ages out at 10: the request at 11 moves the
		// head from 1 by less than a ring, past the slot of 0.
		{name: "within a ring", steps: []int64{0, 11, 12, 13}, lease: 1},
		// At 12 the head moves on from 1 by a whole ring: every slot
		// must be emptied, the slot of 0 too, or it counts again once
		// the ring comes round to it (22).
		{name: "past a ring", steps: []int64{0, 12, 13, 22, 22, 23}, lease: 1},
		{name: "the request's bucket", steps: []int64{0, 9, 10, 11, 20}, lease: 9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A store and clock of its own: subtests that share a fixed
			// clock move it under each other's calls.
			red, clock := newFixedRedis(t, srv)
			app := "given-back-" + strings.ReplaceAll(tt.name, " ", "-")
			q := limit.Request{Key: app + "|/a", Params: p}
			pair := newStorePair(t, red, clock)
			for i, s := range tt.steps {
				where := func() string { return fmt.Sprintf("step %d at %ds", i, s) }
				pair.allow(us0+s*sec, []limit.Request{q}, where)
				checkRing(t, srv, redisKey(app, q.Key), where())
				if i == 0 {
					refillAndReturn(t, red, clock, q, us0+tt.lease*sec)
					checkRing(t, srv, redisKey(app, q.Key), "after the lease")
				}
			}
		})
	}
}

// TestRedisSlidingWindowLeasesGivenBack is TestRedisSlidingWindowLeaseGivenBack
// at random: usual requests with gaps of up to two and a half windows, and
// between them leases counted and given back in full.
func TestRedisSlidingWindowLeasesGivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	for seed := range 16 {
		rng := rand.New(rand.NewPCG(uint64(seed), 19))
		prec := 1 + rng.IntN(6)
		p := &limit.Params{Algorithm: "sliding_window", Limit: 1 + rng.Int64N(3), Precision: prec,
			Window: us(int64(prec) * (1 + rng.Int64N(100_000)))}
		app := fmt.Sprintf("leases-back-%d", seed)
		q := limit.Request{Key: app + "|/a", Params: p}
		mem := newTestMemory(t)
		w := micros(p.Window)
		now := us0 + rng.Int64N(w)
		for step := range 120 {
			now += []int64{0, rng.Int64N(w/int64(prec) + 1), rng.Int64N(w), rng.Int64N(w * 5 / 2)}[rng.IntN(4)]
			where := func() string { return fmt.Sprintf("%+v, step %d", *p, step) }
			if rng.IntN(3) == 0 {
				refillAndReturn(t, red, clock, q, now)
			} else {
				sameDecision(t, mem, red, clock, now, q, where)
			}
			checkRing(t, srv, redisKey(app, q.Key), where())
		}
	}
}

// sameDecision decides q at now (µs) in mem and red and fails t unless
// they decide alike: admitted or not, room, reset and retry. (A lease
// given back leaves the Redis counter's head bucket where the lease was
// counted, later than the memory store's; but no request is denied before
// a count moves it on: the lease was counted only with room to spare.)
func sameDecision(t *testing.T, mem *limit.Memory, red *Store, clock *fixedClock, now int64, q limit.Request, where func() string) {
	t.Helper()
	ctx := context.Background()
	reqs := []limit.Request{q}
	mres, rres := make([]limit.Result, 1), make([]limit.Result, 1)
	if _, err := mem.Allow(ctx, time.Unix(0, now*1000), reqs, mres); err != nil {
		t.Fatalf("%s: memory: %v", where(), err)
	}
	clock.us.Store(now)
	if _, err := red.Allow(ctx, time.Time{}, reqs, rres); err != nil {
		t.Fatalf("%s: redis: %v", where(), err)
	}
	m, r := mres[0], rres[0]
	if m.Allowed != r.Allowed || m.Remaining != r.Remaining || !nearUp(m.RetryAfter, r.RetryAfter, 0) ||
		!nearUp(m.Reset, r.Reset, 0) {
		t.Fatalf("%s at +%dµs: got %+v in redis, want %+v as in memory", where(), now-us0, r, m)
	}
}

// TestRedisUsualCallLockouts checks the usual call of one limit against
// the memory store where a lockout is in play: a
// rule that locks out, its lockout lifted by a reload that drops it, and
// the rule locking out again.
func TestRedisUsualCallLockouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sec := int64(time.Second / time.Microsecond)
	for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			// A store and clock of its own: subtests that share a fixed
			// clock move it under each other's calls.
			red, clock := newFixedRedis(t, srv)
			lock := &limit.Params{Algorithm: alg, Limit: 2, Window: 10 * time.Second, Lock: 30 * time.Second}
			if alg == "sliding_window" {
				lock.Precision = 10
			}
			free := *lock
			free.Lock = 0
			pair := newStorePair(t, red, clock)
			key := "usual-lock-" + alg + "|/a"
			// Seconds from us0 and the rule then.
			steps := []struct {
				at int64
				p  *limit.Params
			}{
				{0, lock}, {0, lock}, {0, lock}, // the third is denied: locked for 30s
				{11, lock},               // still locked
				{12, &free}, {12, &free}, // a reload lifts the lockout
				{13, lock}, // the lockout lifted does not come back
				{25, lock}, {25, lock}, {25, lock}, {26, lock},
			}
			for i, s := range steps {
				where := func() string { return fmt.Sprintf("step %d at %ds", i, s.at) }
				pair.allow(us0+s.at*sec, []limit.Request{{Key: key, Params: s.p}}, where)
			}
		})
	}
}

// leasedKey counts a lease of several tokens on q's key at the fixed
// instant now (µs), which writes when its tokens were leased (_lt), and
// returns the reply.
func leasedKey(t *testing.T, red *Store, clock *fixedClock, q limit.Request, now int64) []int64 {
	t.Helper()
	clock.us.Store(now)
	keys, args := rawCall(t, red, q, "1 - 0 100000 1 0")
	v, err := red.run(context.Background(), keys, args)
	if err != nil || len(v) != 10 || v[0] != 1 || v[5] < 2 {
		t.Fatalf("lease at +%dµs: %v %v, want several tokens leased", now-us0, v, err)
	}
	return v
}

// TestRedisUsualDenialLeaseAge checks that a usual call denied by a key
// whose tokens were leased reports how long ago (the reply's ninth
// value), which a usual call reads only when denied: the gateway waits
// for tokens that may come back on it (tokensMayComeBack). Alone (usual),
// with a lockout (the long way), with two limits, in a batch; and so does
// a call that reads every field (a lease's, a deferred one).
func TestRedisUsualDenialLeaseAge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	const ago = 1500
	for _, tt := range []struct {
		name  string
		lock  time.Duration
		two   bool
		batch bool
		call  string // the call argument, when not the usual one
	}{
		{name: "alone"},
		{name: "lockout", lock: time.Minute},
		{name: "two limits", two: true},
		{name: "batch", batch: true},
		{name: "lease call", call: "1 - 0 100 1 0"},
		{name: "deferred", call: "1 d 0 0 0 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			app := "age-" + strings.ReplaceAll(tt.name, " ", "-")
			p := &limit.Params{Algorithm: "fixed_window", Limit: 4, Window: time.Minute, Lock: tt.lock}
			q := limit.Request{Key: app + "|/a", Params: p}
			// The lease takes the room the fleet's one gateway may, half;
			// two usual calls the rest.
			leasedKey(t, red, clock, q, us0)
			clock.us.Store(us0 + 1)
			for range 2 {
				keys, args := rawCall(t, red, q, "")
				if v, err := red.run(ctx, keys, args); err != nil || v[0] != 1 {
					t.Fatalf("got %v %v, want admitted", v, err)
				}
			}
			clock.us.Store(us0 + ago)
			reqs := []limit.Request{q}
			if tt.two {
				reqs = append(reqs, limit.Request{Key: app + "|/b", Params: &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}})
			}
			keys, tag, _, err := redisKeys(reqs)
			if err != nil {
				t.Fatal(err)
			}
			args := red.scriptArgs(time.Time{}, reqs, tag, nil)
			if tt.call != "" {
				args[2] = tt.call
			}
			var v []int64
			if tt.batch {
				other := rawCallBatch(t, red, limit.Request{Key: app + "|/c", Params: p})
				b := []*batchCall{other, {keys: keys, args: args}}
				red.runAsOne(ctx, b)
				v, err = b[1].v, b[1].err
			} else {
				v, err = red.run(ctx, keys, args)
			}
			if err != nil || len(v) != 2+8*len(reqs) || v[0] != 0 || v[1] != 0 {
				t.Fatalf("got %v %v, want denied", v, err)
			}
			if v[8] != ago {
				t.Errorf("the lease's age: got %dµs, want %dµs (%v)", v[8], ago, v)
			}
		})
	}
}

// rawCallBatch returns the usual call of q as a call of a batch.
func rawCallBatch(t *testing.T, red *Store, q limit.Request) *batchCall {
	t.Helper()
	keys, args := rawCall(t, red, q, "")
	return &batchCall{keys: keys, args: args}
}

// TestRedisBatchRepliesAsAlone checks that a batch in one script call
// (many, redis_entry.lua) answers each call with the numbers it answers the
// call alone with: a usual call of one limit admitted on a counter that
// exists (usual's string) or denied (its table, joined), a limit that
// counts nothing (Remaining -1) or blocks, a new key, a lease, every
// algorithm, and two limits, in a batch of calls of one shape ("=") and of mixed shapes
// ("*"). Two apps have the same counters; one's calls go alone, the
// other's in the batch, at one instant.
func TestRedisBatchRepliesAsAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	fw := &limit.Params{Algorithm: "fixed_window", Limit: 4, Window: time.Minute}
	sw := &limit.Params{Algorithm: "sliding_window", Limit: 3, Window: time.Minute, Precision: 6}
	tb := &limit.Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second}
	free := &limit.Params{Algorithm: "fixed_window", Limit: -1, Window: time.Minute}
	blocked := &limit.Params{Algorithm: "fixed_window", Limit: 0, Window: time.Minute}
	type call struct {
		reqs []limit.Request
		call string // the call argument of the first limit, "" for the usual
	}
	one := func(app, key string, p *limit.Params, c string) call {
		return call{reqs: []limit.Request{{Key: app + "|/" + key, Params: p}}, call: c}
	}
	build := func(app string, c call) *batchCall {
		keys, tag, _, err := redisKeys(c.reqs)
		if err != nil {
			t.Fatal(err)
		}
		args := red.scriptArgs(time.Time{}, c.reqs, tag, nil)
		args[2] = c.call
		return &batchCall{keys: keys, args: args}
	}
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed %v", mixed), func(t *testing.T) {
			// The counters before: fw and sw counted once, full with a
			// lease (denied, its age reported), tb counted twice.
			var setup, calls []func(app string) call
			setup = append(setup,
				func(app string) call { return one(app, "fw", fw, "") },
				func(app string) call { return one(app, "sw", sw, "") },
				func(app string) call { return one(app, "full", fw, "1 - 0 100000 1 0") },
				func(app string) call { return one(app, "full", fw, "") },
				func(app string) call { return one(app, "full", fw, "") },
				func(app string) call { return one(app, "tb", tb, "") },
				func(app string) call { return one(app, "tb", tb, "") },
			)
			calls = append(calls,
				func(app string) call { return one(app, "fw", fw, "") },
				func(app string) call { return one(app, "sw", sw, "") },
				func(app string) call { return one(app, "full", fw, "") },
				func(app string) call { return one(app, "tb", tb, "") },
				func(app string) call { return one(app, "free", free, "") },
				func(app string) call { return one(app, "blocked", blocked, "") },
				func(app string) call { return one(app, "new", sw, "") },
				func(app string) call { return one(app, "new2", sw, "") },
				func(app string) call { return one(app, "lease", sw, "1 - 0 100000 1 0") },
				func(app string) call { return one(app, "sw", sw, "") },
				func(app string) call { return one(app, "sw", sw, "") },
			)
			// Every algorithm, on an odd window, counted twice before:
			// what it answers is whole µs, which a batch's string spells
			// as the call alone's integers.
			for _, c := range algCases(7) {
				p := *c.p
				p.Window = time.Second + 333*time.Microsecond
				if p.Warmup > 0 {
					p.Warmup = 777 * time.Millisecond
				}
				setup = append(setup,
					func(app string) call { return one(app, c.name, &p, "") },
					func(app string) call { return one(app, c.name, &p, "") })
				calls = append(calls, func(app string) call { return one(app, c.name, &p, "") })
			}
			if mixed {
				calls = append(calls, func(app string) call {
					return call{reqs: []limit.Request{{Key: app + "|/fw", Params: fw}, {Key: app + "|/two", Params: sw}}}
				})
			}
			alone, batched := fmt.Sprintf("alone-%v", mixed), fmt.Sprintf("batch-%v", mixed)
			clock.us.Store(us0)
			for _, app := range []string{alone, batched} {
				for i, f := range setup {
					c := build(app, f(app))
					if _, err := red.run(ctx, c.keys, c.args); err != nil {
						t.Fatalf("setup %d: %v", i, err)
					}
				}
			}
			clock.us.Store(us0 + 2500)
			var batch []*batchCall
			for _, f := range calls {
				batch = append(batch, build(batched, f(batched)))
			}
			red.runAsOne(ctx, batch)
			for i, f := range calls {
				c := build(alone, f(alone))
				want, err := red.run(ctx, c.keys, c.args)
				if err != nil {
					t.Fatalf("call %d alone: %v", i, err)
				}
				if got := batch[i]; got.err != nil || fmt.Sprint(got.v) != fmt.Sprint(want) {
					t.Errorf("call %d (%s): got %v %v in the batch, want %v as alone", i, c.keys, got.v, got.err, want)
				}
			}
		})
	}
}

// TestRedisCopiedCommands checks the copy of a new key in a batch on
// Redis's clock (again, redis_decide.lua): the batch's first new key is
// read (GET) and written, the next are copies of it; a key that exists,
// which the copy finds there, is read and counted as it stands, and not
// copied again. With an ACL that refuses COPY, every key is counted all
// the same, and COPY is not tried again in the batch.
func TestRedisCopiedCommands(t *testing.T) {
	t.Parallel()
	for _, acl := range []bool{false, true} {
		t.Run(fmt.Sprintf("acl %v", acl), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			url := srv.URL()
			if acl {
				url = deniedURL(t, srv, "-copy")
			}
			red := shortWayStore(t, url, -1)
			ctx := context.Background()
			c := srv.Client()
			p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
			for range 2 {
				b := shortWayCall(t, red, "app|/|z", "", p)
				if _, err := red.run(ctx, b.keys, b.args); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			names := []string{"x", "a", "z", "b"}
			var batch []*batchCall
			for _, n := range names {
				batch = append(batch, shortWayCall(t, red, "app|/|"+n, "", p))
			}
			red.runAsOne(ctx, batch)
			calls, _ := commandCalls(t, srv)
			for i, want := range []int64{9, 9, 7, 9} {
				b := batch[i]
				if b.err != nil || len(b.v) != 10 || b.v[0] != 1 || b.v[2] != want {
					t.Errorf("%s: %v %v, want admitted with %d remaining", names[i], b.v, b.err, want)
				}
			}
			for i, n := range names {
				want := []string{"1", "1", "3", "1"}[i]
				if got := counterFields(t, c, redisKey("app", "app|/|"+n))["t"]; got != want {
					t.Errorf("%s counted %q, want %s", n, got, want)
				}
			}
			// x is read and written; a, z and b copied onto (z fails),
			// and z read and written.
			want := map[string]int{"get": 2, "set": 2, "copy": 3}
			if acl {
				// COPY refused (not counted as a call): every key is read
				// and written.
				want = map[string]int{"get": 4, "set": 4, "copy": 0}
			}
			for cmd, n := range want {
				if calls[cmd] != n {
					t.Errorf("%s: %d calls, want %d (%v)", cmd, calls[cmd], n, calls)
				}
			}
		})
	}
}

// TestRedisCopiedBudget checks that a batch's copies of new keys keep to
// the key budget (again, redis_decide.lua): each copy counts in the
// database's size as the batch knows it, and once that reaches the
// budget, new keys go to their overflow counter.
func TestRedisCopiedBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget = 3
	red := shortWayStore(t, srv.URL(), budget)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	const over = "app|/|overflow"
	var batch []*batchCall
	for i := range 6 {
		batch = append(batch, shortWayCall(t, red, fmt.Sprintf("app|/|n%d", i), over, p))
	}
	red.runAsOne(ctx, batch)
	if got, want := overflowed(t, batch), []int64{0, 0, 0, 1, 1, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("overflowed %v, want %v", got, want)
	}
	c := srv.Client()
	for i := range 6 {
		if n := c.Exists(ctx, redisKey("app", fmt.Sprintf("app|/|n%d", i))).Val(); (n == 1) != (i < budget) {
			t.Errorf("n%d: counter exists %v, want %v", i, n == 1, i < budget)
		}
	}
	// The counters of the budget and the overflow counter.
	if got := c.DBSize(ctx).Val(); got != budget+1 {
		t.Errorf("DBSIZE %d, want %d", got, budget+1)
	}
}

// TestRedisLeaseOnlyPastOnePerLeaseAhead checks that a call asks for a
// lease only at a rate that leases more than the request's own token:
// above one request per leaseAhead (scriptArgs). Below, the script would
// lease the request's token alone (lease, redis_acts.lua), which the gateway keeps
// none of (tokenLeases.grant): the lease call and the usual call decide,
// write and answer alike. Above, the script leases more.
func TestRedisLeaseOnlyPastOnePerLeaseAhead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	ctx := context.Background()
	cl := srv.Client()
	// The highest rate that leases no more than the request: leaseAhead
	// holds at most one of its requests.
	most := int64(time.Second / leaseAhead)
	for _, p := range []*limit.Params{
		{Algorithm: "fixed_window", Limit: 100, Window: time.Second},
		{Algorithm: "sliding_window", Limit: 100, Window: time.Second, Precision: 10},
	} {
		for _, rate := range []int64{1, most / 2, most, most + 1} {
			name := fmt.Sprintf("%s rate %d", p.Algorithm, rate)
			q := limit.Request{Key: "ahead|/" + strings.ReplaceAll(name, " ", "-"), Params: p}
			reqs := []limit.Request{q}
			_, tag, _, err := redisKeys(reqs)
			if err != nil {
				t.Fatal(err)
			}
			args := red.scriptArgs(time.Time{}, reqs, tag, &leaseAsk{rates: []int64{rate}, have: []int64{0}})
			lease := fmt.Sprintf("1 - 0 %d 1 0", rate)
			if got := args[2]; (rate <= most) != (got == "") || (rate > most && got != lease) {
				t.Errorf("%s: the call argument is %q, want the usual one up to %d a second, else %q", name, got, most, lease)
			}
			// The script, asked for a lease at this rate and for the
			// usual call on a twin key, at instants from a bucket's start
			// to its end.
			twin := limit.Request{Key: q.Key + "-usual", Params: p}
			for i, at := range []int64{0, 1, 50_000, 84_999, 85_000, 99_999, 100_000, 985_000, 999_999} {
				clock.us.Store(us0 + at)
				lk, la := rawCall(t, red, q, lease)
				lv, err := red.run(ctx, lk, la)
				if err != nil {
					t.Fatal(err)
				}
				uk, ua := rawCall(t, red, twin, "")
				uv, err := red.run(ctx, uk, ua)
				if err != nil {
					t.Fatal(err)
				}
				span := lv[6]
				want := max(min((rate*min(span, micros(leaseAhead))+999_999)/1_000_000, 50), 1)
				if lv[0] != 1 || lv[5] != want {
					t.Fatalf("%s, call %d at +%dµs: the lease call answered %v, want %d tokens leased", name, i, at, lv, want)
				}
				if rate > most {
					continue
				}
				if fmt.Sprint(lv[:5]) != fmt.Sprint(uv[:5]) {
					t.Errorf("%s, call %d: the lease call answered %v, the usual call %v", name, i, lv, uv)
				}
				lh, uh := counterFields(t, cl, lk[0]), counterFields(t, cl, uk[0])
				if fmt.Sprint(lh) != fmt.Sprint(uh) {
					t.Errorf("%s, call %d: the lease call wrote %v, the usual call %v", name, i, lh, uh)
				}
			}
		}
	}
}

// TestRedisUsualCallOverflowCounter checks the usual call of new callers
// counted on their overflow counter, which is read as a usual call reads
// a counter (the fields up to the algorithm's): each counts there. Each
// algorithm has a Redis of its own: the budget of one key counts every
// key of the database.
func TestRedisUsualCallOverflowCounter(t *testing.T) {
	t.Parallel()
	for _, c := range algCases(10) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			red := newTestRedis(t, Config{URL: srv.URL(), MaxKeys: 1, DenyCacheSize: -1, Timeout: 10 * time.Second})
			clock := &fixedClock{}
			clock.us.Store(us0)
			red.fixedNow = clock.us.Load
			app := "over-" + c.name
			p := *c.p
			p.Window = time.Minute
			for i := range 5 {
				q := limit.Request{Key: fmt.Sprintf("%s|/|%d", app, i), Overflow: app + "|/|overflow", Tag: app, Params: &p}
				res := make([]limit.Result, 1)
				if ok, err := red.Allow(context.Background(), time.Time{}, []limit.Request{q}, res); err != nil || !ok {
					t.Fatalf("caller %d: %v %v, want admitted", i, ok, err)
				}
				// The first has its own counter, the others share the
				// overflow counter.
				want := int64(9 - max(i-1, 0))
				if c.p.Warmup > 0 {
					continue
				}
				if res[0].Remaining != want {
					t.Errorf("caller %d: %d remaining, want %d", i, res[0].Remaining, want)
				}
			}
		})
	}
}

// TestRedisUsualCallWrites checks what a usual call on a counter that
// exists sends Redis: one read and one write of its string.
func TestRedisUsualCallWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Minute, Precision: 10}
	q := limit.Request{Key: "writes|/a", Params: p}
	call := func() {
		t.Helper()
		keys, args := rawCall(t, red, q, "")
		if v, err := red.run(ctx, keys, args); err != nil || v[0] != 1 {
			t.Fatalf("got %v %v, want admitted", v, err)
		}
	}
	call()
	clock.us.Store(us0 + 1000)
	if err := srv.Client().ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		call()
	}
	calls, _ := commandCalls(t, srv)
	for cmd, n := range map[string]int{"get": 5, "set": 5, "pexpire": 0, "hget": 0, "hmget": 0, "hset": 0} {
		if calls[cmd] != n {
			t.Errorf("%s: %d calls, want %d (%v)", cmd, calls[cmd], n, calls)
		}
	}
}

// BenchmarkRedisSlidingWindowSecondRequest measures Redis's time (the
// FCALL's, INFO commandstats) per decision of a sliding_window key's
// second request, a bucket or more after its first (a total of 1 moving
// on): batches of 64 such calls in one script call, as the gateway sends
// them, on a fixed clock.
func BenchmarkRedisSlidingWindowSecondRequest(b *testing.B) {
	srv := redistest.Start(b)
	red, clock := newFixedRedis(b, srv)
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil || !red.fn.on.Load() {
		b.Fatalf("the function library is not loaded: %v", err)
	}
	p := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Second, Precision: 10}
	const batchSize = 64
	width := micros(p.Window) / int64(p.Precision)
	mk := func(round, j int) *batchCall {
		q := limit.Request{Key: fmt.Sprintf("second|/%d-%d", round, j), Params: p}
		reqs := []limit.Request{q}
		keys, tag, _, _ := redisKeys(reqs)
		args := red.scriptArgs(time.Time{}, reqs, tag, nil)
		args[2] = "" // the usual call, on a key the gateway asked about
		return &batchCall{keys: keys, args: args}
	}
	var usec, n int
	b.ReportAllocs()
	for round := 0; b.Loop(); round++ {
		now := us0 + int64(round)*2*micros(p.Window)
		first, second := make([]*batchCall, batchSize), make([]*batchCall, batchSize)
		for j := range batchSize {
			first[j], second[j] = mk(round, j), mk(round, j)
		}
		clock.us.Store(now)
		red.runAsOne(ctx, first)
		clock.us.Store(now + width*int64(1+round%12))
		u0 := fcallUsec(srv)
		red.runAsOne(ctx, second)
		u1 := fcallUsec(srv)
		for _, c := range second {
			if c.err != nil || c.v[0] != 1 {
				b.Fatalf("%v %v", c.v, c.err)
			}
		}
		usec += u1 - u0
		n += batchSize
	}
	b.ReportMetric(float64(usec)/float64(n), "redis-µs/decision")
}

// fcallUsec returns the time Redis spent in FCALL (µs, INFO
// commandstats).
func fcallUsec(srv *redistest.Server) int {
	for _, f := range strings.Split(srv.Info("commandstats")["cmdstat_fcall"], ",") {
		if k, v, _ := strings.Cut(f, "="); k == "usec" {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
