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

// isMemo reports whether k is a key of the memos of calls (memo.go),
// which count in the key budget like any key but which a test cannot
// foresee: how many there are depends on how the calls went.
func isMemo(k string) bool { return strings.Contains(k, "#done:") }

// isOverflow reports whether k is an overflow counter.
func isOverflow(k string) bool { return strings.HasSuffix(k, "|overflow") }

// scanKeys returns the keys of c's database that match pattern (SCAN's
// MATCH) for which keep, if not nil, reports true. Keys that expired are
// not among them, though DBSIZE may count them until Redis reclaims them.
func scanKeys(t testing.TB, c *redis.Client, pattern string, keep func(string) bool) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		if k := iter.Val(); keep == nil || keep(k) {
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// callers returns the number of callers' counters in c's database: the
// keys of pattern but overflow counters and memos.
func callers(t testing.TB, c *redis.Client, pattern string) int64 {
	t.Helper()
	return int64(len(scanKeys(t, c, pattern, func(k string) bool { return !isOverflow(k) && !isMemo(k) })))
}

// bareCall decides reqs in one script call without a memo (run), so
// that every key the call leaves in Redis is a counter and a test can
// tell the database's size exactly. It returns how many of reqs were
// counted on their overflow counter, or an error unless they were
// admitted.
func bareCall(red *Store, reqs []limit.Request) (int64, error) {
	keys, tag, _, err := redisKeys(reqs)
	if err != nil {
		return 0, err
	}
	v, err := red.run(context.Background(), keys, red.scriptArgs(time.Now(), reqs, tag, nil))
	if err != nil || len(v) == 0 || v[0] != 1 {
		return 0, fmt.Errorf("%v: got %v %v, want admitted", reqs, v, err)
	}
	return v[len(v)-1], nil
}

// decideBare is bareCall that fails t on an error.
func decideBare(t testing.TB, red *Store, reqs []limit.Request) int64 {
	t.Helper()
	over, err := bareCall(red, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return over
}

// fillTo sets plain keys (as another program would) in c's database until
// it holds n keys but memos, which may expire while a test runs; it
// returns how many it set.
func fillTo(t testing.TB, c *redis.Client, n int64) int64 {
	t.Helper()
	have, err := dbSize(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var set int64
	for i := have; i < n; i++ {
		if err := c.Set(context.Background(), "other:"+strconv.FormatInt(i, 10), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		set++
	}
	return set
}

// TestRedisBudgetFlood sends a million distinct callers to one Redis with
// a budget of 6,400 keys: no caller's counter is created once the
// database holds the budget, so Redis ends up with at most 6,400 callers'
// counters (fewer by the memos of the calls that filled it) and the
// overflow counters; every other caller counted on its rule's overflow
// counter; admitted callers keep their own counters; and keys without an
// Overflow are created anyway.
func TestRedisBudgetFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, ncallers, rules, workers = 6400, 1_000_000, 32, 8
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
			for i := w; i < ncallers; i += workers {
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
	t.Logf("%d callers in %s", ncallers, time.Since(start).Round(time.Millisecond))

	c := srv.Client()
	own := callers(t, c, "gw:{~*}|*|/r*")
	overflow := int64(len(scanKeys(t, c, "gw:*|overflow", nil)))
	t.Logf("%d callers' counters, %d overflow counters, DBSIZE %d", own, overflow, c.DBSize(ctx).Val())
	if own > budget {
		t.Errorf("callers' counters after %d callers: got %d, want at most the budget %d", ncallers, own, budget)
	}
	// Until the database held the budget, every call of the flood made 32
	// counters and at most one other key (its memo); the overflow
	// counters came after.
	if least := int64(budget - budget/rules - 2*rules); own < least {
		t.Errorf("callers' counters after %d callers: got %d, want at least %d (the budget less the memos of the calls that filled it)", ncallers, own, least)
	}
	if max := int64(limit.CallerBuckets * rules); overflow > max {
		t.Errorf("overflow counters: got %d, want at most one per bucket and rule, %d", overflow, max)
	}
	if own+overflow < budget {
		t.Errorf("callers' and overflow counters: got %d, want at least the budget %d (the flood used it up)", own+overflow, budget)
	}
	if got, want := red.Stats().Overflowed, int64(ncallers)-own; got != want {
		t.Errorf("Stats().Overflowed: got %d, want %d (every caller without a counter of its own)", got, want)
	}

	// A caller with a counter keeps counting on it; a new one counts on
	// the overflow counter of its bucket and rule.
	tag := callerTags[0]
	admitted := scanKeys(t, c, "gw:{"+tag+"}|*|/r*", func(k string) bool { return !isOverflow(k) })
	if len(admitted) == 0 {
		t.Fatalf("no caller of bucket %s has a counter", tag)
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
	// database.
	conf := limit.Request{Key: "app-1|/conf", Tag: tag, Params: p}
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{conf}, res); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, redisKey(tag, conf.Key)).Result(); n != 1 {
		t.Error("a key without Overflow in a full database was not created")
	}
}

// TestRedisBudgetAppSlot checks an app whose limits mix an app-wide
// counter and a per-caller one, all in the app's slot, under the same
// budget as every other key: the app total counts every request, the
// callers' counters stop once the database holds the budget; and once
// other keys fill it, none of another such app's callers gets a counter
// of its own (the app has no budget of its own).
func TestRedisBudgetAppSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, ncallers = 64, 200
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 1000, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 2)
	mix := func(app string, i int) []limit.Request {
		ip := floodIP(i)
		return []limit.Request{
			{Key: app + "|", Params: p},
			{Key: app + "|/login|" + ip, Overflow: app + "|/login|overflow", Params: p},
		}
	}
	for i := range ncallers {
		if ok, err := red.Allow(ctx, time.Time{}, mix("mix", i), res); !ok || err != nil {
			t.Fatalf("caller %d: got %v %v, want admitted", i, ok, err)
		}
		if res[0].Remaining != p.Limit-int64(i)-1 {
			t.Fatalf("caller %d: the app total's Remaining %d, want %d", i, res[0].Remaining, p.Limit-int64(i)-1)
		}
	}
	c := srv.Client()
	own := callers(t, c, "gw:{mix}:/login|*")
	// The app total and own counters, and at most a memo per call that
	// made one, filled the database.
	if own >= budget || own < (budget-2)/2 {
		t.Errorf("login counters: got %d, want below the budget %d and at least %d", own, budget, (budget-2)/2)
	}
	if got := red.Stats().Overflowed; got != ncallers-own {
		t.Errorf("Stats().Overflowed: got %d, want %d (the callers without a counter)", got, ncallers-own)
	}
	if n, err := redistest.FieldInt(ctx, c, redisKey("mix", "mix|/login|overflow"), "t"); err != nil || int64(n) != ncallers-own {
		t.Errorf("the overflow counter counted %d (%v), want %d", n, err, ncallers-own)
	}

	// Keys of the "*" section, or anything else, fill the database: a
	// second mixing app's callers all go to its overflow counter.
	fillTo(t, c, budget)
	before := red.Stats().Overflowed
	for i := range 5 {
		if ok, err := red.Allow(ctx, time.Time{}, mix("mix2", i), res); !ok || err != nil {
			t.Fatalf("mix2's caller %d: got %v %v, want admitted", i, ok, err)
		}
	}
	if n := callers(t, c, "gw:{mix2}:/login|*"); n != 0 {
		t.Errorf("mix2's login counters in a full database: got %d, want 0", n)
	}
	if got := red.Stats().Overflowed - before; got != 5 {
		t.Errorf("mix2's callers overflowed: got %d, want 5", got)
	}
	if n := c.Exists(ctx, redisKey("mix2", "mix2|")).Val(); n != 1 {
		t.Error("mix2's app total (no Overflow) was not created in a full database")
	}
}

// TestRedisBudgetExpiredKeysFreeRoom fills the budget with callers whose
// counters expire soon: once Redis has reclaimed them, new callers get
// counters of their own again, while the callers whose counters live on
// keep them.
func TestRedisBudgetExpiredKeysFreeRoom(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, long = 8, 3
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	c := srv.Client()
	// A counter lives until its bucket is full again (5 s for the one
	// token a caller takes): long enough that the budget is filled before
	// any expires even on a loaded machine, short enough to wait for.
	short := &limit.Params{Algorithm: "token_bucket", Limit: 100000, Window: 500000 * time.Second}
	hour := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	tag := callerTags[7]
	// Enough callers for a probe every 10 ms over the wait's 60 s.
	ips := ipsInBucket(tag, 7000)
	own := func(ip string) bool {
		t.Helper()
		n, err := c.Exists(context.Background(), redisKey(tag, "*|/|"+ip)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	for i, ip := range ips[:budget] {
		p := short
		if i < long {
			p = hour
		}
		if over := decideBare(t, red, []limit.Request{callerReq("/", ip, p)}); over != 0 || !own(ip) {
			t.Fatalf("caller %d within the budget: overflowed %d, counter %v; want its own counter", i, over, own(ip))
		}
	}
	if over := decideBare(t, red, []limit.Request{callerReq("/", ips[budget], short)}); over != 1 || own(ips[budget]) {
		t.Fatalf("caller %d past the budget: overflowed %d, counter %v; want the overflow counter", budget, over, own(ips[budget]))
	}
	next := budget
	eventually.True(t, 60*time.Second, func() bool {
		next++
		return decideBare(t, red, []limit.Request{callerReq("/", ips[next], short)}) == 0 && own(ips[next])
	}, "no new caller got a counter after the short counters expired (%d tried)", next)
	t.Logf("caller %d got a counter of its own", next)
	for i, ip := range ips[:long] {
		if over := decideBare(t, red, []limit.Request{callerReq("/", ip, hour)}); over != 0 {
			t.Errorf("long-lived caller %d: counted on the overflow counter, want its own", i)
		}
		if n, err := redistest.FieldInt(context.Background(), c, redisKey(tag, "*|/|"+ip), "c"); err != nil || n != 2 {
			t.Errorf("long-lived caller %d: its counter counted %d (%v), want 2", i, n, err)
		}
	}
	if n := callers(t, c, "*"); n > budget {
		t.Errorf("callers' counters after the expiry: got %d, want at most %d", n, budget)
	}
}

// TestRedisBudgetOff checks MaxKeys -1: no budget, no overflow.
func TestRedisBudgetOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: -1})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "leaky_bucket", Limit: 10, Window: time.Hour}
	res := make([]limit.Result, 1)
	const ncallers = 300
	for i := range ncallers {
		if _, err := red.Allow(ctx, time.Time{}, []limit.Request{callerReq("/", floodIP(i), p)}, res); err != nil {
			t.Fatal(err)
		}
	}
	c := srv.Client()
	if n := callers(t, c, "*"); n != ncallers {
		t.Errorf("callers' counters without a budget: got %d, want one per caller, %d", n, ncallers)
	}
	if n := len(scanKeys(t, c, "*", isOverflow)); n != 0 {
		t.Errorf("overflow counters without a budget: got %d, want 0", n)
	}
	if got := red.Stats().Overflowed; got != 0 {
		t.Errorf("Stats().Overflowed without a budget: got %d, want 0", got)
	}
	if _, err := New(Config{URL: srv.URL(), MaxKeys: -2}); err == nil || !strings.Contains(err.Error(), "max keys") {
		t.Errorf("MaxKeys -2: got %v, want an error naming max keys", err)
	}
}

// TestRedisBudgetCluster floods a three-node Redis Cluster with callers:
// the budget holds on each master (its own DBSIZE), so each ends up with
// exactly the budget of callers' counters, the buckets spread over the
// nodes; and once counters on a full node expire, new callers of its
// buckets get counters of their own again.
func TestRedisBudgetCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	const budget = 100
	red := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	redistest.Ready(t, red)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour}
	const ncallers, workers = 3000, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var overflowed int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var n int64
			for i := w; i < ncallers; i += workers {
				over, err := bareCall(red, []limit.Request{callerReq("/", floodIP(i), p)})
				if err != nil {
					errs <- err
					return
				}
				n += over
			}
			mu.Lock()
			overflowed += n
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// No key of a node expires and the calls carry no memo: each master
	// made counters until its DBSIZE reached the budget, and then only
	// overflow counters.
	var own int64
	for i, n := range cl.Nodes {
		got := callers(t, n.Client(), "*")
		if got != budget {
			t.Errorf("node %d: %d callers' counters, want the budget %d (DBSIZE %d)", i, got, budget, n.Client().DBSize(context.Background()).Val())
		}
		own += got
	}
	if overflowed != ncallers-own {
		t.Errorf("callers counted on an overflow counter: got %d, want %d", overflowed, ncallers-own)
	}

	// Counters of a full node expire: new callers of a bucket on it get
	// counters of their own again.
	tag := callerTags[42]
	owner := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer owner.Close()
	var node *redis.Client
	for _, n := range cl.Nodes {
		if len(scanKeys(t, n.Client(), "gw:{"+tag+"}|*", nil)) > 0 {
			node = n.Client()
		}
	}
	if node == nil {
		t.Fatalf("no node holds bucket %s", tag)
	}
	expiring := scanKeys(t, node, "*", func(k string) bool { return !isOverflow(k) })[:budget/2]
	for _, k := range expiring {
		if err := node.PExpire(context.Background(), k, 100*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The callers that probe share an overflow counter that never fills.
	late := &limit.Params{Algorithm: "fixed_window", Limit: limit.MaxLimit, Window: 1000 * time.Hour}
	ips := ipsInBucket(tag, 4000) // for a probe every 10 ms over 30 s
	next := 0
	eventually.True(t, 30*time.Second, func() bool {
		next++
		if decideBare(t, red, []limit.Request{callerReq("/late", ips[next], late)}) != 0 {
			return false
		}
		n, err := owner.Exists(context.Background(), redisKey(tag, "*|/late|"+ips[next])).Result()
		return err == nil && n == 1
	}, "no new caller got a counter on a full node after its counters expired")
	if n := callers(t, node, "*"); n > budget {
		t.Errorf("the node's callers' counters after the expiry: got %d, want at most %d", n, budget)
	}
}

// TestRedisBudgetFull checks a Redis at maxmemory with noeviction for
// callers with an Overflow key: the counters are refused (OOM) like any
// write, and the store reports a failure, never an admission.
func TestRedisBudgetFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: 64, BreakerThreshold: 1000, DenyCacheSize: -1})
	p := &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 1)
	tag := callerTags[5]
	ips := ipsInBucket(tag, 10)
	// One caller with a key.
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

// TestRedisBudgetInOneBatch checks that the key budget counts exactly
// within one script call (a batch, runAsOne): DBSIZE is read once, at the
// batch's first new caller, and every key the batch creates after it
// counts, those without an Overflow too. With 3 keys in the database and
// a budget of 8, of a batch of 6 new callers and 2 new keys without an
// Overflow between them, the first 3 callers get counters of their own
// (the 2 other keys take the rest of the room) and the last 3 are counted
// on the overflow counter. The next batch reads DBSIZE afresh: once 3
// keys are gone, of 4 new callers (one whose counter was deleted among
// them) the first 2 get counters.
func TestRedisBudgetInOneBatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget, filler = 8, 3
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	redistest.Ready(t, red)
	if !red.fn.on.Load() {
		t.Fatal("the function library is not loaded")
	}
	c := srv.Client()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range filler {
		c.Set(ctx, fmt.Sprintf("other:%d", i), "x", 0)
	}
	if n := c.DBSize(ctx).Val(); n != filler {
		t.Fatalf("DBSIZE before the batch: %d, want %d", n, filler)
	}
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	caller := func(i int) string { return fmt.Sprintf("app|/|caller-%d", i) }
	// run sends the calls of keys in one script call (a key with "n" has
	// no Overflow), and returns how many of each were counted on the
	// overflow counter.
	run := func(keys ...string) []int64 {
		t.Helper()
		var batch []*batchCall
		for _, k := range keys {
			q := limit.Request{Key: k, Overflow: "app|/|overflow", Tag: "app", Params: p}
			if strings.Contains(k, "|n") {
				q.Overflow = ""
			}
			reqs := []limit.Request{q}
			keys, tag, _, err := redisKeys(reqs)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, &batchCall{keys: keys, args: red.scriptArgs(time.Now(), reqs, tag, nil)})
		}
		red.runAsOne(ctx, batch)
		var over []int64
		for i, b := range batch {
			if b.err != nil || len(b.v) == 0 || b.v[0] != 1 {
				t.Fatalf("%s: %v %v, want admitted", keys[i], b.v, b.err)
			}
			over = append(over, b.v[len(b.v)-1])
		}
		return over
	}
	exists := func(name string, k string, want bool) {
		t.Helper()
		if n := c.Exists(ctx, redisKey("app", k)).Val(); (n == 1) != want {
			t.Errorf("%s: %s exists %v, want %v", name, k, n == 1, want)
		}
	}

	got := run(caller(0), "app|/|n0", caller(1), caller(2), "app|/|n1", caller(3), caller(4), caller(5))
	if want := []int64{0, 0, 0, 0, 0, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("the first batch: overflowed %v, want %v", got, want)
	}
	for i := range 6 {
		exists("the first batch", caller(i), i < 3)
	}
	exists("the first batch", "app|/|n0", true)
	exists("the first batch", "app|/|n1", true)
	if n, _ := redistest.FieldInt(ctx, c, redisKey("app", "app|/|overflow"), "t"); n != 3 {
		t.Errorf("the overflow counter counted %d, want 3", n)
	}
	// The fillers, 3 callers' counters, 2 keys without Overflow and the
	// overflow counter.
	if n := c.DBSize(ctx).Val(); n != budget+1 {
		t.Errorf("DBSIZE after the batch: %d, want %d", n, budget+1)
	}

	// Two fillers and caller 0's counter gone: room for 2.
	c.Del(ctx, "other:0", "other:1", redisKey("app", caller(0)))
	got = run(caller(6), caller(0), caller(7), caller(8))
	if want := []int64{0, 0, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("the second batch: overflowed %v, want %v", got, want)
	}
	for i, want := range map[int]bool{6: true, 0: true, 7: false, 8: false} {
		exists("the second batch", caller(i), want)
	}
	if n := c.DBSize(ctx).Val(); n != budget {
		t.Errorf("DBSIZE after the second batch: %d, want the budget %d", n, budget)
	}
}

// TestRedisBudgetArgumentAnyBytes checks that the key budget's argument
// carries overflow counter names of any bytes (spaces and digits that
// look like the argument's own fields here), for a call with two
// budgeted limits: past the budget of two keys, both limits of a new
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
	if got := red.Stats().Overflowed; got != 2 {
		t.Errorf("Stats().Overflowed: got %d, want 2 (both limits of the second caller)", got)
	}
}

// TestRedisBudgetOtherData checks that keys that other programs store in
// the gateway's database count against the budget, and keys of another
// database do not: with the database filled with plain keys up to the
// budget, a new caller is counted on its overflow counter while a key
// without an Overflow is still created; once three of the plain keys are
// gone, the first new caller gets a counter of its own and the next does
// not (the overflow counter and the key without Overflow took the rest).
func TestRedisBudgetOtherData(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const budget = 20
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: budget, DenyCacheSize: -1, Leases: -1})
	ctx := context.Background()
	c := srv.Client()
	c1 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { c1.Close() })
	for i := range 5 * budget {
		if err := c1.Set(ctx, fmt.Sprintf("db1:%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: 1000 * time.Hour}
	tag := callerTags[3]
	ips := ipsInBucket(tag, 4)
	own := func(ip string) bool { return c.Exists(ctx, redisKey(tag, "*|/|"+ip)).Val() == 1 }
	if over := decideBare(t, red, []limit.Request{callerReq("/", ips[0], p)}); over != 0 || !own(ips[0]) {
		t.Errorf("a new caller while database 1 holds %d keys: overflowed %d, want a counter of its own", 5*budget, over)
	}
	if n := fillTo(t, c, budget); n != budget-1 {
		t.Fatalf("set %d plain keys, want %d", n, budget-1)
	}
	if over := decideBare(t, red, []limit.Request{callerReq("/", ips[1], p)}); over != 1 || own(ips[1]) {
		t.Errorf("a new caller in a database full of other keys: overflowed %d, want counted on the overflow counter", over)
	}
	conf := limit.Request{Key: "app-1|/conf", Tag: "app-1", Params: p}
	if over := decideBare(t, red, []limit.Request{conf}); over != 0 || c.Exists(ctx, redisKey("app-1", conf.Key)).Val() != 1 {
		t.Error("a key without Overflow in a full database was not created")
	}
	c.Del(ctx, "other:1", "other:2", "other:3")
	if over := decideBare(t, red, []limit.Request{callerReq("/", ips[2], p)}); over != 0 || !own(ips[2]) {
		t.Errorf("a new caller once 3 keys are gone: overflowed %d, want a counter of its own", over)
	}
	if over := decideBare(t, red, []limit.Request{callerReq("/", ips[3], p)}); over != 1 || own(ips[3]) {
		t.Errorf("the next new caller: overflowed %d, want counted on the overflow counter", over)
	}
	if n := c.DBSize(ctx).Val(); n != budget {
		t.Errorf("DBSIZE: %d, want the budget %d", n, budget)
	}
}

// BenchmarkRedisBudget measures what the key budget costs a decision: on a
// caller whose key exists (the common case), on new callers while the
// budget has room, and on new callers past it, with the budget and without
// (MaxKeys -1, the store before the budget). It reports Redis's own time
// per script call (INFO commandstats) as redis-µs/call. Leases are off
// (Leases -1), so that every decision is a script call: with them, an
// existing caller's requests are mostly admitted from its lease.
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
			red := newTestRedis(b, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: tt.budget, DenyCacheSize: -1, Leases: -1})
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

// scriptStats are INFO commandstats' totals for the store's script calls:
// FCALL (the function library) and EVALSHA (the script, before it loads).
type scriptStats struct{ calls, usec int64 }

func commandStats(b *testing.B, c redis.Cmdable) scriptStats {
	b.Helper()
	var s scriptStats
	stats := redistest.Info(b, c, "commandstats")
	for _, cmd := range []string{"cmdstat_fcall", "cmdstat_evalsha"} {
		for _, f := range strings.Split(stats[cmd], ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.calls += n
			}
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.usec += n
			}
		}
	}
	return s
}

// BenchmarkRedisBytesPerKey reports what a caller's counter costs Redis,
// for each algorithm at 100 a minute with one request counted: MEMORY
// USAGE of one counter (bytes/key), and the growth of INFO memory's
// used_memory per caller over 20,000 callers (used-bytes/caller), which
// is all a caller costs: the key budget keeps nothing per caller. The
// calls carry no memo (memo.go), which Redis keeps for seconds, not for
// a counter's life. Run it with -benchtime=1x.
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
					if _, err := bareCall(red, []limit.Request{callerReq("/", floodIP(i), &p)}); err != nil {
						b.Fatal(err)
					}
				}
				after := used()
				// The last caller's: a token_bucket's counter expires as
				// soon as its bucket is full again, 0.6s after its request.
				last := floodIP(callers - 1)
				one, err := c.MemoryUsage(ctx, redisKey(limit.CallerTag(last), "*|/|"+last)).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(one), "bytes/key")
				b.ReportMetric(float64(after-before)/callers, "used-bytes/caller")
			}
		})
	}
}
