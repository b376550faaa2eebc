package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Tests of a batch's new keys made copies of its first (again,
// redis_decide.lua) and of the key budget's per-script-call count of the
// database's keys (budget.lua).

// shortWayStore returns a store on url that decides on Redis's clock (a
// batch's calls share one instant) with the function library loaded.
func shortWayStore(t *testing.T, url string, maxKeys int) *Store {
	t.Helper()
	red := newTestRedis(t, Config{URL: url, Timeout: 10 * time.Second, MaxKeys: maxKeys, DenyCacheSize: -1, Leases: -1})
	redistest.Ready(t, red)
	if !red.fn.on.Load() {
		t.Fatal("the function library is not loaded")
	}
	return red
}

// shortWayCall returns the usual call of one limit p on key (with the
// overflow counter over when not "").
func shortWayCall(t *testing.T, red *Store, key, over string, p *limit.Params) *batchCall {
	t.Helper()
	tag, _, _ := strings.Cut(key, "|")
	reqs := []limit.Request{{Key: key, Overflow: over, Tag: tag, Params: p}}
	keys, tag, _, err := redisKeys(reqs)
	if err != nil {
		t.Fatal(err)
	}
	args := red.scriptArgs(time.Now(), reqs, tag, nil)
	if args[2] != "" {
		t.Fatalf("the usual call's argument is %q", args[2])
	}
	return &batchCall{keys: keys, args: args}
}

// respelled returns b with its call spelled spelling (redis.lua): the
// same request, which the script decides as the usual call when it is
// "1 - 0 0 0 0".
func respelled(b *batchCall, spelling string) *batchCall {
	b.args[2] = spelling
	return b
}

// overflowed returns, for each call of batch, whether it was counted on
// its overflow counter, and fails t unless each was admitted.
func overflowed(t *testing.T, batch []*batchCall) []int64 {
	t.Helper()
	var out []int64
	for i, b := range batch {
		if b.err != nil || len(b.v) != 10 || b.v[0] != 1 {
			t.Fatalf("call %d: %v %v, want admitted", i, b.v, b.err)
		}
		out = append(out, b.v[9])
	}
	return out
}

// TestRedisShortWayOverflowCounterNotCopied checks that an overflow
// counter that was made new in a batch is its template (again); once a
// later call of the batch counts on it again, a new key must not be made a
// copy of it. Here the third call is a new key without an Overflow (an
// app's), which the full budget does not stop: its counter must hold its
// own one request, not the overflow counter's two.
func TestRedisShortWayOverflowCounterNotCopied(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := shortWayStore(t, srv.URL(), 1)
	ctx := context.Background()
	c := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	const over = "app|/|overflow"

	kept := shortWayCall(t, red, "app|/|kept", over, p)
	if kept.v, kept.err = red.run(ctx, kept.keys, kept.args); kept.err != nil || kept.v[9] != 0 {
		t.Fatalf("the first caller: %v %v, want its own counter", kept.v, kept.err)
	}
	back := redisKey("app", "app|/|back")

	batch := []*batchCall{
		shortWayCall(t, red, "app|/|a", over, p),
		shortWayCall(t, red, "app|/|b", over, p),
		shortWayCall(t, red, "app|/|back", "", p),
	}
	red.runAsOne(ctx, batch)
	if got, want := overflowed(t, batch), []int64{1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("overflowed %v, want %v", got, want)
	}
	if got := batch[2].v[2]; got != 9 {
		t.Errorf("the key without Overflow: %d remaining, want 9", got)
	}
	if got := counterFields(t, c, redisKey("app", over))["t"]; got != "2" {
		t.Errorf("the overflow counter counted %q, want 2", got)
	}
	if got := counterFields(t, c, back)["t"]; got != "1" {
		t.Errorf("the key without Overflow counted %q, want 1 (%v)", got, counterFields(t, c, back))
	}
}

// TestRedisShortWayOtherDatabase checks that one library serves every
// database of a server; what a script call learns (the batch's template
// key, the database's size) must not be used by the next, here in
// another database at the same (fixed) instant.
func TestRedisShortWayOtherDatabase(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	url1 := strings.TrimSuffix(srv.URL(), "/0") + "/1"
	clock := &fixedClock{}
	clock.us.Store(us0)
	var stores [2]*Store
	for i, url := range []string{srv.URL(), url1} {
		stores[i] = shortWayStore(t, url, 2)
		stores[i].fixedNow = clock.us.Load
	}
	c0 := srv.Client()
	c1 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { c1.Close() })
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	// Database 0: one new caller, the batch's template; the database
	// then holds 1 key of 2.
	red0, red1 := stores[0], stores[1]
	b0 := []*batchCall{shortWayCall(t, red0, "app|/|t", "app|/|overflow", p)}
	red0.runAsOne(ctx, b0)
	if got := overflowed(t, b0); !slices.Equal(got, []int64{0}) {
		t.Fatalf("database 0: overflowed %v", got)
	}
	if n := c0.DBSize(ctx).Val(); n != 1 {
		t.Fatalf("database 0: DBSIZE %d", n)
	}
	// Database 1: a key of the template's name, counted 5 times, and
	// another: the budget of 2 keys.
	tmpl := redisKey("app", "app|/|t")
	setCounterFields(t, c1, tmpl, "_id", "sliding_window/60000000/10", "t", "5")
	c1.Expire(ctx, tmpl, time.Hour)
	alive := redisKey("app", "app|/|alive")
	setCounterFields(t, c1, alive, "_id", "x")
	c1.Expire(ctx, alive, time.Hour)
	// A call alone (decide) and a batch (many) each read DBSIZE afresh.
	alone := shortWayCall(t, red1, "app|/|alone", "app|/|overflow", p)
	var err error
	if alone.v, err = red1.run(ctx, alone.keys, alone.args); err != nil || alone.v[9] != 1 {
		t.Errorf("database 1: a new caller alone past a full set: %v %v, want sent to the overflow counter", alone.v, err)
	}
	// n has no budget, m has: n is made afresh (not a copy of database
	// 1's t), m is sent to the overflow counter.
	b1 := []*batchCall{
		shortWayCall(t, red1, "app|/|n", "", p),
		shortWayCall(t, red1, "app|/|m", "app|/|overflow", p),
	}
	red1.runAsOne(ctx, b1)
	if got := overflowed(t, b1); !slices.Equal(got, []int64{0, 1}) {
		t.Errorf("database 1: overflowed %v, want [0 1]", got)
	}
	for _, k := range []string{"app|/|alone", "app|/|m"} {
		if n := c1.Exists(ctx, redisKey("app", k)).Val(); n != 0 {
			t.Errorf("database 1: %s has a counter past the budget", k)
		}
	}
	// The two keys, n and the overflow counter.
	if n := c1.DBSize(ctx).Val(); n != 4 {
		t.Errorf("database 1: DBSIZE %d, want 4", n)
	}
	if got := counterFields(t, c1, redisKey("app", "app|/|n"))["t"]; got != "1" {
		t.Errorf("database 1: n counted %q, want 1", got)
	}
}

// TestRedisShortWayProbedAtALaterInstant checks that the template of a
// rule's new keys at one instant (again) must not make a new key at a
// later one, even as the first call of a batch.
func TestRedisShortWayProbedAtALaterInstant(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	c := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	first := []*batchCall{shortWayCall(t, red, "app|/|a", "", p)}
	red.runAsOne(ctx, first)
	overflowed(t, first)
	clock.us.Add(7_000_000) // the next bucket
	later := []*batchCall{shortWayCall(t, red, "app|/|b", "", p)}
	red.runAsOne(ctx, later)
	overflowed(t, later)
	alone := respelled(shortWayCall(t, red, "app|/|c", "", p), "1 - 0 0 0 0")
	var err error
	if alone.v, err = red.run(ctx, alone.keys, alone.args); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(later[0].v, alone.v) {
		t.Errorf("reply %v, want %v", later[0].v, alone.v)
	}
	got, want := counterFields(t, c, later[0].keys[0]), counterFields(t, c, alone.keys[0])
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

// TestRedisShortWayExistingKeyNoBudget checks that the key budget costs
// nothing for a counter that exists (budget.lua), also when the batch has
// a key to copy: here the database holds more than the budget, which
// would send a new caller to its overflow counter, and no call of the
// batch reads DBSIZE.
func TestRedisShortWayExistingKeyNoBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget = 3
	red := shortWayStore(t, srv.URL(), budget)
	ctx := context.Background()
	c := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	const over = "app|/|overflow"
	y := shortWayCall(t, red, "app|/|y", over, p)
	if _, err := red.run(ctx, y.keys, y.args); err != nil {
		t.Fatal(err)
	}
	for i := range budget {
		k := redisKey("app", fmt.Sprintf("app|/|alive-%d", i))
		setCounterFields(t, c, k, "_id", "x")
		c.Expire(ctx, k, time.Hour)
	}
	batch := []*batchCall{
		shortWayCall(t, red, "app|/|x", "", p), // new, no budget: the key to copy
		shortWayCall(t, red, "app|/|y", over, p),
	}
	c.ConfigResetStat(ctx)
	red.runAsOne(ctx, batch)
	calls, _ := commandCalls(t, srv)
	if got := overflowed(t, batch); !slices.Equal(got, []int64{0, 0}) || batch[1].v[2] != 8 {
		t.Errorf("y: %v, want counted on its own counter, 8 remaining", batch[1].v)
	}
	// DBSIZE is read for a new caller (a new key with an Overflow): x
	// has none, and y's counter exists.
	if calls["dbsize"] != 0 {
		t.Errorf("DBSIZE was read for a batch without a new caller: %v", calls)
	}
	// Two new callers in one batch: DBSIZE is read once, and both are
	// past the budget.
	batch = []*batchCall{shortWayCall(t, red, "app|/|z1", over, p), shortWayCall(t, red, "app|/|z2", over, p)}
	c.ConfigResetStat(ctx)
	red.runAsOne(ctx, batch)
	calls, _ = commandCalls(t, srv)
	if got := overflowed(t, batch); !slices.Equal(got, []int64{1, 1}) || calls["dbsize"] != 1 {
		t.Errorf("two new callers past the budget: overflowed %v, DBSIZE read %d times; want [1 1], once", got, calls["dbsize"])
	}
}

// commandCalls returns the calls of each command Redis ran since its
// statistics were reset (INFO commandstats), but INFO's and CONFIG's, and
// the microseconds FCALL took.
func commandCalls(t *testing.T, srv *redistest.Server) (map[string]int, int) {
	t.Helper()
	out, usec := map[string]int{}, 0
	for name, v := range srv.Info("commandstats") {
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" || name == "config" {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			k, n, _ := strings.Cut(f, "=")
			x, _ := strconv.Atoi(n)
			switch {
			case k == "calls":
				out[name] = x
			case k == "usec" && name == "fcall":
				usec = x
			}
		}
	}
	return out, usec
}
