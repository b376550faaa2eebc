package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// floodIP returns the i-th address of a flood of distinct callers.
func floodIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
}

// ipsInBucket returns n distinct addresses whose CallerTag is tag.
func ipsInBucket(tag string, n int) []string {
	var ips []string
	for i := 0; len(ips) < n; i++ {
		if ip := floodIP(i); limit.CallerTag(ip) == tag {
			ips = append(ips, ip)
		}
	}
	return ips
}

// callerReq returns the request of the caller ip under rule of the "*"
// section, as the proxy builds it.
func callerReq(rule, ip string, p *limit.Params) limit.Request {
	return limit.Request{Key: "*|" + rule + "|" + ip, Overflow: "*|" + rule + "|overflow", Tag: limit.CallerTag(ip), Params: p}
}

// TestRedisBudgetFlood sends a million distinct callers to one Redis with
// a budget of 6,400 keys: Redis ends up holding the 6,400 caller keys, a
// set per bucket and the overflow counters, no more; every other caller
// counted against its rule's overflow counter; admitted callers keep their
// own counters; and keys without an Overflow are created anyway.
func TestRedisBudgetFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, callers, rules, workers = 6400, 1_000_000, 32, 8
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, PoolTimeout: 30 * time.Second, MaxKeys: budget, DenyCacheSize: -1})
	ctx := context.Background()
	// A sliding window's counters live for a window after their last
	// request: a fixed window's would all end at the hour's edge, freeing
	// the budget mid-flood when the test runs across it.
	p := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: time.Hour, Precision: 60}

	// One call decides the rules r0..r31 of 32 callers of one bucket, so
	// that a million callers take 31,250 calls.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			pending := map[string][]limit.Request{}
			send := func(reqs []limit.Request) error {
				res := make([]limit.Result, len(reqs))
				ok, err := red.Allow(ctx, time.Time{}, reqs, res)
				if err == nil && !ok {
					err = fmt.Errorf("callers %v denied, want admitted", reqs)
				}
				return err
			}
			for i := w; i < callers; i += workers {
				ip := floodIP(i)
				tag := limit.CallerTag(ip)
				q := pending[tag]
				q = append(q, callerReq("/r"+strconv.Itoa(len(q)), ip, p))
				if len(q) == rules {
					if err := send(q); err != nil {
						errs <- err
						return
					}
					q = q[:0]
				}
				pending[tag] = q
			}
			for _, q := range pending {
				if len(q) > 0 {
					if err := send(q); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d callers in %s", callers, time.Since(start).Round(time.Millisecond))

	c := srv.Client()
	size, err := dbSize(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	perBucket := int64(budget / limit.CallerBuckets)
	var members int64
	for _, tag := range callerTags {
		n, err := c.ZCard(ctx, budgetSet(tag)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != perBucket {
			t.Errorf("bucket %s's set: %d members, want its budget %d", tag, n, perBucket)
		}
		members += n
	}
	overflow, err := c.Keys(ctx, "gw:*|overflow").Result()
	if err != nil {
		t.Fatal(err)
	}
	if max := int64(budget + limit.CallerBuckets + limit.CallerBuckets*rules); size > max {
		t.Errorf("DBSIZE after %d callers: got %d, want at most the budget %d + %d sets + %d overflow counters", callers, size, budget, limit.CallerBuckets, limit.CallerBuckets*rules)
	}
	if got := size - limit.CallerBuckets - int64(len(overflow)); got != budget {
		t.Errorf("caller keys: got %d, want the budget %d", got, budget)
	}
	if got, want := red.Stats().Overflowed, int64(callers)-members; got != want {
		t.Errorf("Stats().Overflowed: got %d, want %d (every caller past the budget)", got, want)
	}

	// A caller with a key keeps counting against it; a new one counts
	// against the overflow counter of its bucket and rule.
	tag := callerTags[0]
	admitted, err := c.ZRange(ctx, budgetSet(tag), 0, 0).Result()
	if err != nil || len(admitted) != 1 {
		t.Fatalf("a member of %s: got %v %v", tag, admitted, err)
	}
	// "gw:{~00}|*|/r3|10.0.1.2": the rule and the address.
	parts := strings.Split(admitted[0], "|")
	res := make([]limit.Result, 1)
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq(parts[2], parts[3], p)}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != p.Limit-2 {
		t.Errorf("an admitted caller's second request: Remaining %d, want %d (its own counter)", res[0].Remaining, p.Limit-2)
	}
	before := red.Stats().Overflowed
	fresh := ipsInBucket(tag, 1)[0] // counted in the flood too, under another rule
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/new", fresh, p)}, res); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, redisKey(tag, "*|/new|"+fresh)).Result(); n != 0 || red.Stats().Overflowed != before+1 {
		t.Errorf("a new caller past the budget: its key exists %d, overflowed %d → %d; want no key and one more overflow", n, before, red.Stats().Overflowed)
	}
	if n, _ := c.Exists(ctx, redisKey(tag, "*|/new|overflow")).Result(); n != 1 {
		t.Error("the new caller's overflow counter does not exist")
	}

	// A key without Overflow (a configured app's) is created in a full
	// bucket.
	conf := limit.Request{Key: "app-1|/conf", Tag: tag, Params: p}
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{conf}, res); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, redisKey(tag, conf.Key)).Result(); n != 1 {
		t.Error("a key without Overflow in a full bucket was not created")
	}
}

// TestRedisBudgetAppSlot checks the budget of an app whose limits mix an
// app-wide counter and a per-caller one, all in the app's slot: the app
// total counts every request, the callers' keys stop at the budget.
func TestRedisBudgetAppSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, callers = 64, 200
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 1000, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 2)
	for i := range callers {
		ip := floodIP(i)
		reqs := []limit.Request{
			{Key: "mix|", Params: p},
			{Key: "mix|/login|" + ip, Overflow: "mix|/login|overflow", Params: p},
		}
		if ok, err := red.Allow(ctx, time.Time{}, reqs, res); !ok || err != nil {
			t.Fatalf("caller %d: got %v %v, want admitted", i, ok, err)
		}
		if res[0].Remaining != p.Limit-int64(i)-1 {
			t.Fatalf("caller %d: the app total's Remaining %d, want %d", i, res[0].Remaining, p.Limit-int64(i)-1)
		}
	}
	c := srv.Client()
	keys, err := c.Keys(ctx, "gw:{mix}:/login|*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The callers' keys, and the overflow counter.
	if len(keys) != budget+1 {
		t.Errorf("login keys: got %d, want the budget %d and the overflow counter", len(keys), budget)
	}
	if got := red.Stats().Overflowed; got != callers-budget {
		t.Errorf("Stats().Overflowed: got %d, want %d", got, callers-budget)
	}
	if n, err := c.ZCard(ctx, budgetSet("mix")).Result(); err != nil || n != budget {
		t.Errorf("the app's set: got %d %v, want %d", n, err, budget)
	}
}

// TestRedisBudgetExpiredKeysFreeRoom fills a bucket with callers whose
// keys expire soon: once they have, new callers get keys of their own
// again.
func TestRedisBudgetExpiredKeysFreeRoom(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const perBucket = 3
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: perBucket * limit.CallerBuckets, DenyCacheSize: -1})
	ctx := context.Background()
	c := srv.Client()
	// A key lives until its bucket is full again (5 s for the one token
	// a caller takes), long enough that the budget is filled before any
	// expires even on a loaded machine, short enough to wait for; the
	// overflow counter that the callers past the budget share has room
	// for all of them.
	short := &limit.Params{Algorithm: "token_bucket", Limit: 100000, Window: 500000 * time.Second}
	tag := callerTags[7]
	ips := ipsInBucket(tag, 1000)
	res := make([]limit.Result, 1)
	own := func(ip string) bool {
		if ok, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ip, short)}, res); !ok || err != nil {
			t.Fatalf("caller %s: got %v %v, want admitted", ip, ok, err)
		}
		n, err := c.Exists(ctx, redisKey(tag, "*|/|"+ip)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for i, ip := range ips[:perBucket] {
		if !own(ip) {
			t.Fatalf("caller %d within the budget has no key", i)
		}
	}
	if own(ips[perBucket]) {
		t.Fatalf("caller %d past the budget got a key of its own", perBucket)
	}
	next := perBucket + 1
	eventually.True(t, 60*time.Second, func() bool {
		next++
		return own(ips[next])
	}, "no new caller got a key after the bucket's keys expired (%d tried)", next)
	if n, err := c.ZCard(ctx, budgetSet(tag)).Result(); err != nil || n > perBucket {
		t.Errorf("the bucket's set after the expiry: got %d %v, want at most %d", n, err, perBucket)
	}
}

// TestRedisBudgetOff checks MaxKeys -1: no budget, no set, no overflow.
func TestRedisBudgetOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: -1})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "leaky_bucket", Limit: 10, Window: time.Hour}
	res := make([]limit.Result, 1)
	const callers = 300
	for i := range callers {
		if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", floodIP(i), p)}, res); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := dbSize(ctx, srv.Client()); err != nil || n != callers {
		t.Errorf("DBSIZE without a budget: got %d %v, want one key per caller, %d", n, err, callers)
	}
	if got := red.Stats().Overflowed; got != 0 {
		t.Errorf("Stats().Overflowed without a budget: got %d, want 0", got)
	}
	if _, err := New(Config{URL: srv.URL(), MaxKeys: -2}); err == nil || !strings.Contains(err.Error(), "max keys") {
		t.Errorf("MaxKeys -2: got %v, want an error naming max keys", err)
	}
}

// TestRedisBudgetCluster floods a three-node Redis Cluster with callers
// whose keys expire soon: the budget holds over the cluster, the buckets
// spread over its nodes, and pruning (which reads the members' TTLs in
// the bucket's slot) frees room for new callers.
func TestRedisBudgetCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	const perBucket = 10
	const budget = perBucket * limit.CallerBuckets
	red := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 2 * time.Second, MaxKeys: budget, DenyCacheSize: -1})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_log", Limit: 100, Window: 300 * time.Millisecond}
	const callers, workers = 5000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			res := make([]limit.Result, 1)
			for i := w; i < callers; i += workers {
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", floodIP(i), p)}, res); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Counted right after the flood, before the callers' keys expire:
	// within the budget, whatever expired meanwhile.
	var size int64
	spread := 0
	for _, n := range cl.Nodes {
		s, err := dbSize(ctx, n.Client())
		if err != nil {
			t.Fatal(err)
		}
		size += s
		if s > 0 {
			spread++
		}
	}
	if max := int64(budget + 2*limit.CallerBuckets); size > max {
		t.Errorf("keys in the cluster after %d callers: got %d, want at most the budget %d + %d sets and overflow counters", callers, size, budget, 2*limit.CallerBuckets)
	}
	if spread < 3 {
		t.Errorf("keys on %d of 3 nodes, want the buckets spread", spread)
	}
	if red.Stats().Overflowed == 0 {
		t.Error("no caller overflowed, want those past the budget to")
	}
	// Once the first callers' keys expire, a full bucket prunes them and
	// takes new callers.
	tag := callerTags[42]
	ips := ipsInBucket(tag, 2000)
	owner := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer owner.Close()
	next := 0
	eventually.True(t, 20*time.Second, func() bool {
		next++
		res := make([]limit.Result, 1)
		if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/late", ips[next], p)}, res); err != nil {
			t.Fatal(err)
		}
		n, err := owner.Exists(ctx, redisKey(tag, "*|/late|"+ips[next])).Result()
		return err == nil && n == 1
	}, "no new caller got a key in a full bucket after its keys expired")
}

// TestRedisBudgetFull checks a Redis at maxmemory with noeviction for
// callers with an Overflow key: the budget's bookkeeping is refused (OOM)
// like any write, and the store reports a failure, never an admission.
func TestRedisBudgetFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: 64, BreakerThreshold: 1000, DenyCacheSize: -1})
	p := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 1)
	tag := callerTags[5]
	ips := ipsInBucket(tag, 10)
	// One caller with a key, the bucket full.
	if ok, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ips[0], p)}, res); !ok || err != nil {
		t.Fatalf("before filling Redis: got %v %v", ok, err)
	}
	c := srv.Client()
	if err := c.Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	for i, ip := range ips {
		ok, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ip, p)}, res)
		if ok || err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("caller %d on a full Redis: got %v %v, want Redis's OOM and no admission", i, ok, err)
		}
	}
}

// BenchmarkRedisBudget measures what the key budget costs a decision: on a
// caller whose key exists (the common case), on new callers while the
// budget has room, and on new callers past it, with the budget and without
// (MaxKeys -1, the store before the budget). It reports Redis's own time
// per script call (INFO commandstats) as redis-µs/call.
func BenchmarkRedisBudget(b *testing.B) {
	srv := redistest.Start(b)
	p := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: time.Hour, Precision: limit.DefaultPrecision}
	ctx := context.Background()
	run := 0
	for _, tt := range []struct {
		name   string
		budget int
		fresh  bool // a new caller each call
		fill   int  // callers to admit first
	}{
		{name: "existing caller/no budget", budget: -1},
		{name: "existing caller/budget", budget: DefaultMaxKeys},
		{name: "new callers/no budget", budget: -1, fresh: true},
		{name: "new callers/budget with room", budget: DefaultMaxKeys, fresh: true},
		{name: "new callers/budget full", budget: limit.CallerBuckets, fresh: true, fill: 2000},
	} {
		b.Run(tt.name, func(b *testing.B) {
			if err := srv.Client().FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			red := newTestRedis(b, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: tt.budget, DenyCacheSize: -1})
			run++
			prefix := strconv.Itoa(run) + "."
			res := make([]limit.Result, 1)
			for i := range max(tt.fill, 1) {
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", prefix+floodIP(i), p)}, res); err != nil {
					b.Fatal(err)
				}
			}
			i := tt.fill + 1
			before := commandStats(b, srv.Client())
			b.ReportAllocs()
			for b.Loop() {
				ip := prefix + floodIP(0)
				if tt.fresh {
					ip = prefix + floodIP(i)
					i++
				}
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ip, p)}, res); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := commandStats(b, srv.Client())
			b.ReportMetric(float64(after.usec-before.usec)/float64(after.calls-before.calls), "redis-µs/call")
		})
	}
}

// scriptStats are INFO commandstats' totals for EVALSHA.
type scriptStats struct{ calls, usec int64 }

func commandStats(b *testing.B, c redis.Cmdable) scriptStats {
	b.Helper()
	var s scriptStats
	for _, f := range strings.Split(redistest.Info(b, c, "commandstats")["cmdstat_evalsha"], ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			s.calls, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			s.usec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return s
}

// BenchmarkRedisBytesPerKey reports what a caller's counter costs Redis,
// for each algorithm at 100 a minute with one request counted: MEMORY
// USAGE of one counter (bytes/key), and the growth of INFO memory's
// used_memory per caller over 20,000 callers, its entry in its bucket's
// set included (used-bytes/caller). Run it with -benchtime=1x.
func BenchmarkRedisBytesPerKey(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	c := srv.Client()
	const callers = 20_000
	for _, ac := range algCases(100) {
		p := *ac.p
		p.Window = time.Minute
		b.Run(ac.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				red := newTestRedis(b, Config{URL: srv.URL(), Timeout: 5 * time.Second, DenyCacheSize: -1})
				res := make([]limit.Result, 1)
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", "warm-up", &p)}, res); err != nil {
					b.Fatal(err)
				}
				used := func() int64 {
					n, _ := strconv.ParseInt(redistest.Info(b, c, "memory")["used_memory"], 10, 64)
					return n
				}
				before := used()
				for i := range callers {
					if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", floodIP(i), &p)}, res); err != nil {
						b.Fatal(err)
					}
				}
				after := used()
				one, err := c.MemoryUsage(ctx, redisKey(limit.CallerTag(floodIP(0)), "*|/|"+floodIP(0))).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(one), "bytes/key")
				b.ReportMetric(float64(after-before)/callers, "used-bytes/caller")
			}
		})
	}
}

// TestRedisBudgetPrunesExpiredFirst checks that a full budget frees the
// room of expired counters for new callers however many live counters
// joined before them: a counter joins its set due when it expires, so the
// 36 hour-long counters that filled most of a bucket first are not looked
// at before the 4 that expired after 100 ms. (Members due when they
// joined sent the new callers to the overflow counter: a prune looks at
// 32 members.)
func TestRedisBudgetPrunesExpiredFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const perBucket, long, short = 40, 36, 4
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: perBucket * limit.CallerBuckets, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	hour := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	brief := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: 50 * time.Millisecond, Precision: 1}
	tag := callerTags[9]
	ips := ipsInBucket(tag, long+2*short)
	res := make([]limit.Result, 1)
	admit := func(ip string, p *limit.Params) {
		t.Helper()
		if ok, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", ip, p)}, res); !ok || err != nil {
			t.Fatalf("caller %s: got %v %v, want admitted", ip, ok, err)
		}
	}
	for _, ip := range ips[:long] {
		admit(ip, hour)
	}
	for _, ip := range ips[long : long+short] {
		admit(ip, brief)
	}
	c := srv.Client()
	if n := c.ZCard(ctx, budgetSet(tag)).Val(); n != perBucket {
		t.Fatalf("the bucket's set: %d members, want %d (full)", n, perBucket)
	}
	eventually.True(t, 30*time.Second, func() bool {
		for _, ip := range ips[long : long+short] {
			if c.Exists(ctx, redisKey(tag, "*|/|"+ip)).Val() != 0 {
				return false
			}
		}
		return true
	}, "the brief counters did not expire")
	for _, ip := range ips[long+short:] {
		admit(ip, hour)
		if n := c.Exists(ctx, redisKey(tag, "*|/|"+ip)).Val(); n != 1 {
			t.Errorf("new caller %s: no counter of its own, want one in the room the expired counters left", ip)
		}
	}
	if n := c.ZCard(ctx, budgetSet(tag)).Val(); n != perBucket {
		t.Errorf("the bucket's set: %d members, want %d", n, perBucket)
	}
	if n := c.Exists(ctx, redisKey(tag, "*|/|overflow")).Val(); n != 0 {
		t.Errorf("the overflow counter exists, want no caller sent to it")
	}
}

// TestRedisBudgetInOneBatch checks the key budget across the calls of one
// script call, whose new counters join their set together at its end: of
// 8 new callers of a set with room for 5, the first 5 get counters of
// their own, due when they expire, and the others are counted on the
// overflow counter. Once 2 members are due and their counters gone, a
// batch of 4 new callers gets the 2 places the prune frees and sends the
// other 2 to the overflow counter.
func TestRedisBudgetInOneBatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget = 5
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	redistest.Ready(t, red)
	if !red.fn.on.Load() {
		t.Fatal("the function library is not loaded")
	}
	c := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	key := func(i int) string { return fmt.Sprintf("app|/|caller-%d", i) }
	// run sends callers from..to-1 in one script call, and returns how
	// many of each were counted on the overflow counter.
	run := func(from, to int) []int64 {
		t.Helper()
		var batch []*batchCall
		for i := from; i < to; i++ {
			reqs := []limit.Request{{Key: key(i), Overflow: "app|/|overflow", Tag: "app", Params: p}}
			keys, tag, _, err := redisKeys(reqs)
			if err != nil {
				t.Fatal(err)
			}
			args := red.scriptArgs(time.Now(), reqs, tag, nil)
			batch = append(batch, &batchCall{keys: keys, args: args})
		}
		red.runAsOne(ctx, batch)
		var over []int64
		for i, b := range batch {
			if b.err != nil || len(b.v) == 0 || b.v[0] != 1 {
				t.Fatalf("caller %d: %v %v, want admitted", from+i, b.v, b.err)
			}
			over = append(over, b.v[len(b.v)-1])
		}
		return over
	}
	check := func(name string, got, want []int64) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: overflowed %v, want %v", name, got, want)
		}
	}
	members := func() []redis.Z { return c.ZRangeWithScores(ctx, budgetSet("app"), 0, -1).Val() }

	start := time.Now()
	check("the first batch", run(0, 8), []int64{0, 0, 0, 0, 0, 1, 1, 1})
	m := members()
	if len(m) != budget {
		t.Fatalf("the set holds %v, want the first %d callers", m, budget)
	}
	for _, z := range m {
		// Due no earlier than its counter expires: a minute after it was
		// counted (the window).
		if due := time.UnixMilli(int64(z.Score)); due.Before(start.Add(time.Minute)) {
			t.Errorf("member %v: due at %v, want a minute after %v", z.Member, due, start)
		}
	}
	for i := range 8 {
		if n := c.Exists(ctx, redisKey("app", key(i))).Val(); (n == 1) != (i < budget) {
			t.Errorf("caller %d: counter exists %v, want %v", i, n == 1, i < budget)
		}
	}
	if n, _ := redistest.FieldInt(ctx, c, redisKey("app", "app|/|overflow"), "t"); n != 3 {
		t.Errorf("the overflow counter counted %d, want 3", n)
	}

	// Callers 0 and 1 gone, their members due.
	for i := range 2 {
		c.Del(ctx, redisKey("app", key(i)))
		c.ZAdd(ctx, budgetSet("app"), redis.Z{Score: 0, Member: redisKey("app", key(i))})
	}
	check("after 2 expired", run(8, 12), []int64{0, 0, 1, 1})
	var got []string
	for _, z := range members() {
		got = append(got, z.Member.(string))
	}
	slices.Sort(got)
	var want []string
	for _, i := range []int{2, 3, 4, 8, 9} {
		want = append(want, redisKey("app", key(i)))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the set holds %v, want %v", got, want)
	}

	// Caller 3's counter gone and due, and caller 3 back with new
	// caller 12: caller 3 is a member already, so it gets a counter
	// again; caller 12 finds
	// the set full of live counters once the prune has moved caller 3's
	// member to its counter's expiry.
	c.Del(ctx, redisKey("app", key(3)))
	c.ZAdd(ctx, budgetSet("app"), redis.Z{Score: 0, Member: redisKey("app", key(3))})
	// Caller 4's counter gone too, its member due in ten hours: back, it
	// keeps that.
	c.Del(ctx, redisKey("app", key(4)))
	later := float64(time.Now().Add(10 * time.Hour).UnixMilli())
	c.ZAdd(ctx, budgetSet("app"), redis.Z{Score: later, Member: redisKey("app", key(4))})
	back := time.Now()
	reqs := func(i int) []limit.Request {
		return []limit.Request{{Key: key(i), Overflow: "app|/|overflow", Tag: "app", Params: p}}
	}
	var batch []*batchCall
	callers := []int{4, 3, 12}
	for _, i := range callers {
		keys, tag, _, _ := redisKeys(reqs(i))
		batch = append(batch, &batchCall{keys: keys, args: red.scriptArgs(time.Now(), reqs(i), tag, nil)})
	}
	red.runAsOne(ctx, batch)
	for i, want := range []int64{0, 0, 1} {
		if b := batch[i]; b.err != nil || len(b.v) == 0 || b.v[0] != 1 || b.v[len(b.v)-1] != want {
			t.Errorf("caller %d back: %v %v, want admitted, overflowed %d", callers[i], b.v, b.err, want)
		}
	}
	if got := c.ZScore(ctx, budgetSet("app"), redisKey("app", key(4))).Val(); got != later {
		t.Errorf("caller 4's member due at %v, want kept at %v (ZADD NX)", got, later)
	}
	if n := c.ZCard(ctx, budgetSet("app")).Val(); n != budget {
		t.Errorf("the set holds %d members, want %d", n, budget)
	}
	if due := time.UnixMilli(int64(c.ZScore(ctx, budgetSet("app"), redisKey("app", key(3))).Val())); due.Before(back.Add(time.Minute)) {
		t.Errorf("caller 3's member due at %v, want moved to its counter's expiry, a minute after %v", due, back)
	}
}

// TestRedisBudgetArgumentAnyBytes checks that the key budget's argument
// carries set and overflow counter names of any bytes (spaces and digits
// that look like the argument's own fields here), for a call with two
// budgeted limits: past the budget of one counter, both limits of a new
// caller are counted on their own overflow counters.
func TestRedisBudgetArgumentAnyBytes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: 2, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	const tag = "app 7 3 x"
	p := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: quietWindow(time.Hour)}
	caller := func(id string) []limit.Request {
		return []limit.Request{
			{Key: tag + "|/ 1 2|" + id, Overflow: tag + "|/ 1 2|overflow 1", Tag: tag, Params: p},
			{Key: tag + "|/ 3|" + id, Overflow: tag + "|/ 3|overflow 2", Tag: tag, Params: p},
		}
	}
	res := make([]limit.Result, 2)
	for _, id := range []string{"1 1 9", "2 2 9"} {
		if ok, err := red.Allow(ctx, time.Time{}, caller(id), res); !ok || err != nil {
			t.Fatalf("caller %q: %v %v, want admitted", id, ok, err)
		}
	}
	c := srv.Client()
	for _, k := range []string{tag + "|/ 1 2|1 1 9", tag + "|/ 3|1 1 9", tag + "|/ 1 2|overflow 1", tag + "|/ 3|overflow 2"} {
		if n := c.Exists(ctx, redisKey(tag, k)).Val(); n != 1 {
			t.Errorf("%q: no counter, want one", k)
		}
	}
	for _, k := range []string{tag + "|/ 1 2|2 2 9", tag + "|/ 3|2 2 9"} {
		if n := c.Exists(ctx, redisKey(tag, k)).Val(); n != 0 {
			t.Errorf("%q: a counter past the budget", k)
		}
	}
	if n := c.ZCard(ctx, budgetSet(tag)).Val(); n != 2 {
		t.Errorf("the set holds %d members, want 2", n)
	}
}
