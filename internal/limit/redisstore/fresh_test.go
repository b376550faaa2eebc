package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisNewKeysAsAnyOther checks the usual call on a new key, whose
// key the batch's next new keys of its settings are copies of (again in
// redis_decide.lua): for every
// algorithm, with random settings used again at later instants, a batch
// of new keys gets the answers, the fields and the expiry that one such
// key gets the long way (the same request spelled as a call with its
// cost, mode and lease, which never takes the short way), and a second
// request on each is decided alike. New keys sent to their overflow
// counter (the key budget) are checked the same way.
func TestRedisNewKeysAsAnyOther(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	cl := srv.Client()
	// call spells reqs, one usual request, as a call: as the usual call
	// ("") or the long way (longWay).
	call := func(reqs []limit.Request, usual string) *batchCall {
		keys, tag, _, err := redisKeys(reqs)
		if err != nil {
			t.Fatal(err)
		}
		args := red.scriptArgs(time.Time{}, reqs, tag, nil)
		if args[2] != "" {
			t.Fatalf("the usual call's argument is %q, want \"\"", args[2])
		}
		args[2] = usual
		return &batchCall{keys: keys, args: args}
	}
	const longWay = "1 - 0 0 0 0"
	// usual is the usual call's spelling, the same for every call.
	usual := func(int) string { return "" }
	one := func(key string, p *limit.Params) []limit.Request {
		return []limit.Request{{Key: key, Params: p}}
	}
	// same checks that the batch's calls got long's answer and left their
	// key (or, sent to their overflow counter, that) as long left its.
	same := func(name string, batch []*batchCall, long *batchCall, counter func(*batchCall) string) {
		t.Helper()
		if long.err != nil {
			t.Fatalf("%s: the long way: %v", name, long.err)
		}
		want := counterFields(t, cl, counter(long))
		wantTTL := cl.PTTL(ctx, counter(long)).Val()
		for i, c := range batch {
			if c.err != nil || !slices.Equal(c.v, long.v) {
				t.Errorf("%s, new key %d: got %v %v, want %v", name, i, c.v, c.err, long.v)
			}
			if got := counterFields(t, cl, counter(c)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s, new key %d: fields %v, want %v", name, i, got, want)
			}
			// Both expire at one instant; the real clock moved a little
			// between the two reads.
			if ttl := cl.PTTL(ctx, counter(c)).Val(); (ttl > 0) != (wantTTL > 0) || (ttl-wantTTL).Abs() > time.Second {
				t.Errorf("%s, new key %d: time to live %v, want %v", name, i, ttl, wantTTL)
			}
		}
	}
	own := func(c *batchCall) string { return c.keys[0] }
	for _, alg := range limit.Algorithms() {
		if a, _ := limit.Lookup(alg); a == nil {
			continue
		} else if _, ok := a.(limit.RedisAlgorithm); !ok {
			continue
		}
		for seed := range 6 {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			p := redisParams(rng, alg)
			if alg == "token_bucket" && p.Limit > 0 && seed%2 == 0 {
				p.Warmup = us(1 + rng.Int64N(3_000_000))
			}
			// The same settings at three instants: what the short way
			// made at one must not answer at the next.
			for round := range 3 {
				name := fmt.Sprintf("%s/%d/%d (%+v)", alg, seed, round, *p)
				clock.us.Add(1 + rng.Int64N(5_000_000))
				var batch []*batchCall
				for i := range 4 {
					batch = append(batch, call(one(fmt.Sprintf("%s|new|%d", name, i), p), usual(i)))
				}
				red.runAsOne(ctx, batch)
				long := call(one(name+"|long", p), longWay)
				long.v, long.err = red.run(ctx, long.keys, long.args)
				same(name, batch, long, own)

				// A second request on each, a little later.
				clock.us.Add(rng.Int64N(200_000))
				second := call(one(name+"|long", p), "")
				second.v, second.err = red.run(ctx, second.keys, second.args)
				for i := range batch {
					c := call(one(fmt.Sprintf("%s|new|%d", name, i), p), usual(i+1))
					c.v, c.err = red.run(ctx, c.keys, c.args)
					if c.err != nil || second.err != nil || !slices.Equal(c.v, second.v) {
						t.Errorf("%s, new key %d, second request: got %v %v, want %v %v", name, i, c.v, c.err, second.v, second.err)
					}
				}
			}
		}
	}

	// New keys sent to a new overflow counter: a budget of one key, in
	// an empty database, taken by a first caller; each call then has an
	// overflow counter of its own, new, which the reply reports.
	if err := cl.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	budgeted := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Timeout: 10 * time.Second, MaxKeys: 1})
	budgeted.fixedNow = clock.us.Load
	red = budgeted
	p := &limit.Params{Algorithm: "sliding_window", Limit: 5, Window: time.Second, Precision: 10}
	// overflows maps each call's key to its overflow counter's.
	overflows := map[string]string{}
	over := func(key, overflow string) []limit.Request {
		overflows[redisKey("budget", key)] = redisKey("budget", overflow)
		return []limit.Request{{Key: key, Overflow: overflow, Tag: "budget", Params: p}}
	}
	first := call(over("budget|first", "budget|o-first"), "")
	if first.v, first.err = red.run(ctx, first.keys, first.args); first.err != nil || first.v[len(first.v)-1] != 0 {
		t.Fatalf("the first caller: %v %v, want its own counter", first.v, first.err)
	}
	var batch []*batchCall
	for i := range 4 {
		batch = append(batch, call(over(fmt.Sprintf("budget|new|%d", i), fmt.Sprintf("budget|o-%d", i)), usual(i)))
	}
	red.runAsOne(ctx, batch)
	long := call(over("budget|long", "budget|o-long"), longWay)
	long.v, long.err = red.run(ctx, long.keys, long.args)
	if long.err != nil || long.v[len(long.v)-1] != 1 {
		t.Fatalf("the long way: %v %v, want sent to its overflow counter", long.v, long.err)
	}
	overflowOf := func(c *batchCall) string { return overflows[c.keys[0]] }
	same("overflowed", batch, long, overflowOf)
	for _, c := range append(batch, long) {
		if n := cl.Exists(ctx, c.keys[0]).Val(); n != 0 {
			t.Errorf("%s: created, want counted on %s", c.keys[0], overflowOf(c))
		}
	}
}

// TestRedisNewKeysCopied checks the new keys of a batch that the script
// makes by copying the batch's first (COPY, again in redis_decide.lua): a key the batch
// then decides the long way (a second request on it) is no longer copied
// from, and a copy has the fields and expiry of a new key decided alone.
// With COPY and EXISTS refused (an ACL), the same batch is decided alike.
func TestRedisNewKeysCopied(t *testing.T) {
	t.Parallel()
	for _, acl := range []bool{false, true} {
		name := "copy"
		if acl {
			name = "acl without copy and exists"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRedisNewKeysCopied(t, acl)
		})
	}
}

func testRedisNewKeysCopied(t *testing.T, acl bool) {
	ctx := context.Background()
	srv := redistest.Start(t)
	url := srv.URL()
	if acl {
		url = deniedURL(t, srv, "-copy", "-exists")
	}
	red := newTestRedis(t, Config{URL: url, DenyCacheSize: -1, Timeout: 10 * time.Second})
	clock := &fixedClock{}
	clock.us.Store(us0)
	red.fixedNow = clock.us.Load
	redistest.Ready(t, red)
	if !red.fn.on.Load() {
		t.Fatal("the function library is not loaded")
	}
	cl := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 5, Window: time.Second, Precision: 10}
	call := func(name, usual string) *batchCall {
		reqs := []limit.Request{{Key: "copied|/|" + name, Params: p}}
		keys, tag, _, err := redisKeys(reqs)
		if err != nil {
			t.Fatal(err)
		}
		args := red.scriptArgs(time.Time{}, reqs, tag, nil)
		args[2] = usual
		return &batchCall{keys: keys, args: args}
	}
	names := []string{"a", "a", "b", "c", "b"}
	var batch []*batchCall
	for _, n := range names {
		batch = append(batch, call(n, ""))
	}
	red.runAsOne(ctx, batch)
	for i, want := range []int64{4, 3, 4, 4, 3} {
		c := batch[i]
		if c.err != nil || len(c.v) < 3 || c.v[0] != 1 || c.v[2] != want {
			t.Errorf("request %d (%s): %v %v, want admitted with %d remaining", i, names[i], c.v, c.err, want)
		}
	}
	for n, want := range map[string]string{"a": "2", "b": "2", "c": "1"} {
		if got := counterFields(t, cl, batch[0].keys[0][:len(batch[0].keys[0])-1]+n)["t"]; got != want {
			t.Errorf("key %s counted %q, want %s", n, got, want)
		}
	}
	// A new key decided alone, the long way, at the same instant.
	alone := call("alone", "1 - 0 0 0 0")
	if alone.v, alone.err = red.run(ctx, alone.keys, alone.args); alone.err != nil {
		t.Fatal(alone.err)
	}
	if got, want := counterFields(t, cl, batch[3].keys[0]), counterFields(t, cl, alone.keys[0]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("copied key: fields %v, want %v", got, want)
	}
	if got, want := cl.PTTL(ctx, batch[3].keys[0]).Val(), cl.PTTL(ctx, alone.keys[0]).Val(); got <= 0 || (got-want).Abs() > time.Second {
		t.Errorf("copied key: time to live %v, want %v", got, want)
	}
	// Without the ACL, c is the one key made by copying (COPY onto a
	// key that exists fails: a and b the second time); with it, none.
	stat := map[string]int{}
	for _, f := range strings.Split(srv.Info("commandstats")["cmdstat_copy"], ",") {
		k, v, _ := strings.Cut(f, "=")
		stat[k], _ = strconv.Atoi(v)
	}
	if made := stat["calls"] - stat["failed_calls"]; made != map[bool]int{false: 1, true: 0}[acl] {
		t.Errorf("COPY %v: %d keys made by copying", stat, made)
	}
}
