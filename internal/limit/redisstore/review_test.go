package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// reviewStore returns a store on srv in layout that decides at the
// instant its clock holds.
func reviewStore(t *testing.T, srv *redistest.Server, layout string) (*Store, *fixedClock) {
	t.Helper()
	r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Leases: -1, Timeout: 10 * time.Second, Layout: layout})
	c := &fixedClock{}
	c.us.Store(us0)
	r.fixedNow = c.us.Load
	return r, c
}

// reviewParams returns a rule of alg with limit lim per window.
func reviewParams(alg string, lim int64, window time.Duration) *limit.Params {
	p := &limit.Params{Algorithm: alg, Limit: lim, Window: window}
	if alg == "sliding_window" {
		p.Precision = 10
	}
	return p
}

// TestReviewGarbageCounter checks that a counter key holding a string
// that is not a counter's MessagePack map is decided as a new counter
// in either layout, without an error, and is then rewritten.
func TestReviewGarbageCounter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	garbage := map[string]string{
		"text":        "hello world",
		"empty":       "",
		"fixint":      "\x01",
		"truncated":   "\x82\xa1h",
		"map nil key": "\x81\xc0\x01",
		"map bool":    "\x81\xa1z\xc3",
		"map nested":  "\x81\xa1z\x81\xa1a\x01",
	}
	for _, layout := range []string{LayoutString, LayoutHash} {
		for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
			for name, g := range garbage {
				if layout == LayoutHash && (name == "map bool" || name == "map nested") {
					// Values that are neither numbers nor strings: read
					// whole by the string layout only.
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", layout, alg, name), func(t *testing.T) {
					red, clock := reviewStore(t, srv, layout)
					mem := newTestMemory(t)
					p := reviewParams(alg, 3, 10*time.Second)
					q := limit.Request{Key: fmt.Sprintf("garbage|/%s/%s/%s", layout, alg, name), Params: p}
					keys, _, _, err := redisKeys([]limit.Request{q})
					if err != nil {
						t.Fatal(err)
					}
					if err := c.Set(ctx, keys[0], g, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
					for i := range 5 {
						sameDecision(t, mem, red, clock, us0+int64(i)*1000, q, func() string { return fmt.Sprintf("request %d", i) })
					}
				})
			}
		}
	}
}

// TestReviewSameKeyTwice checks a call that names one key twice (one
// state in the script, V shared) against the memory store, in either
// layout, with the same rule and with a reshaping rule.
func TestReviewSameKeyTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, layout := range []string{LayoutString, LayoutHash} {
		for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
			t.Run(layout+"/"+alg, func(t *testing.T) {
				red, clock := reviewStore(t, srv, layout)
				// As a script (EVALSHA) in the hash layout, a function
				// (FCALL) in the string layout.
				if layout == LayoutHash {
					red.fn.off = true
					red.fn.on.Store(false)
				}
				pair := newStorePair(t, red, clock)
				p := reviewParams(alg, 5, 10*time.Second)
				key := "twice|/" + layout + "/" + alg
				for i := range 8 {
					where := func() string { return fmt.Sprintf("request %d", i) }
					pair.allow(us0+int64(i)*700_000, []limit.Request{{Key: key, Params: p}, {Key: key, Params: p}}, where)
				}
			})
		}
	}
}

// TestReviewSameKeyTwoRules checks that a call naming one key under two
// rules of different shapes (one reshaping what the other reads) is
// decided without an error: in the hash layout in either order, in the
// string layout unless the second rule is the sliding log's.
func TestReviewSameKeyTwoRules(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	algs := []string{"sliding_window", "fixed_window", "token_bucket", "sliding_log"}
	for _, layout := range []string{LayoutString, LayoutHash} {
		for _, a1 := range algs {
			for _, a2 := range algs {
				if a1 == a2 || (layout == LayoutString && a2 == "sliding_log") {
					continue
				}
				t.Run(layout+"/"+a1+"/"+a2, func(t *testing.T) {
					red, clock := reviewStore(t, srv, layout)
					p1, p2 := reviewParams(a1, 5, 10*time.Second), reviewParams(a2, 3, 10*time.Second)
					key := "tworules|/" + layout + "/" + a1 + "/" + a2
					for i := range 4 {
						clock.us.Store(us0 + int64(i)*700_000)
						res := make([]limit.Result, 2)
						if _, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: key, Params: p1}, {Key: key, Params: p2}}, res); err != nil {
							t.Fatalf("request %d: %v", i, err)
						}
					}
				})
			}
		}
	}
}

// TestReviewLiftedLockoutDenied checks, in the hash layout, that a
// lockout a reload lifted stays lifted when the call that lifted it was
// denied (nothing counted) and the rule locks out again later, as in
// memory.
func TestReviewLiftedLockoutDenied(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sec := int64(time.Second / time.Microsecond)
	for _, layout := range []string{LayoutHash} {
		for _, alg := range []string{"token_bucket", "leaky_bucket", "sliding_window", "sliding_log"} {
			t.Run(layout+"/"+alg, func(t *testing.T) {
				red, clock := reviewStore(t, srv, layout)
				pair := newStorePair(t, red, clock)
				lock := reviewParams(alg, 2, 60*time.Second)
				lock.Lock = 60 * time.Second
				free := *lock
				free.Lock = 0
				key := "lifted|/" + layout + "/" + alg
				steps := []struct {
					at int64
					p  *limit.Params
				}{
					{0, lock}, {0, lock}, {0, lock}, // locked until 60s
					{12, &free}, // lifted, and denied by the limit
					{31, lock}, {45, lock}, {59, lock}, {61, lock},
				}
				for i, s := range steps {
					where := func() string { return fmt.Sprintf("step %d at %ds", i, s.at) }
					pair.allow(us0+s.at*sec, []limit.Request{{Key: key, Params: s.p}}, where)
				}
			})
		}
	}
}

// TestReviewHoldOutlivesCounts checks that units held keep their key
// alive until their hold ends ("_hx") however the key is counted after
// the hold, in either layout and across layouts: its expiry ("_x") and
// its time to live never fall below the hold's.
func TestReviewHoldOutlivesCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	stores := map[string]*Store{}
	var clock *fixedClock
	for _, layout := range []string{LayoutString, LayoutHash} {
		r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Leases: -1, Timeout: 10 * time.Second, Layout: layout})
		if clock == nil {
			clock = &fixedClock{}
			clock.us.Store(us0)
		}
		r.fixedNow = clock.us.Load
		stores[layout] = r
	}
	for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
		for _, order := range [][]string{{LayoutString, LayoutString}, {LayoutHash, LayoutString}, {LayoutString, LayoutHash}, {LayoutHash, LayoutHash}} {
			t.Run(alg+"/"+order[0]+"-"+order[1], func(t *testing.T) {
				p := reviewParams(alg, 100, time.Second)
				key := "held|/" + alg + "/" + order[0] + "-" + order[1]
				keys, _, _, err := redisKeys([]limit.Request{{Key: key, Params: p}})
				if err != nil {
					t.Fatal(err)
				}
				res := make([]limit.Result, 1)
				// Tests in this function share one clock: run in turn.
				clock.us.Store(us0)
				if ok, err := stores[order[0]].Allow(ctx, time.Time{}, []limit.Request{{Key: key, Params: p, Act: limit.Hold}}, res); err != nil || !ok {
					t.Fatalf("hold: %v %v", ok, err)
				}
				f := counterFields(t, c, keys[0])
				hx := f["_hx"]
				if hx == "" || f["_h"] != "1" {
					t.Fatalf("after the hold: %v, want _h 1 and _hx", f)
				}
				pttl0 := c.PTTL(ctx, keys[0]).Val()
				for i := 1; i <= 5; i++ {
					clock.us.Store(us0 + int64(i)*2_000_000)
					if ok, err := stores[order[1]].Allow(ctx, time.Time{}, []limit.Request{{Key: key, Params: p}}, res); err != nil || !ok {
						t.Fatalf("count %d: %v %v", i, ok, err)
					}
					f := counterFields(t, c, keys[0])
					if f["_hx"] != hx || f["_h"] != "1" {
						t.Fatalf("count %d: %v, want the hold (_h 1, _hx %s) kept", i, f, hx)
					}
					var x, h int64
					fmt.Sscan(f["_x"], &x)
					fmt.Sscan(hx, &h)
					if x < h {
						t.Fatalf("count %d: the key expires at %d, before its hold ends at %s", i, x, hx)
					}
					// The key lives at least until the hold ends: what was
					// left of the hold's time to live, less the clock's steps.
					if pttl := c.PTTL(ctx, keys[0]).Val(); pttl < pttl0-time.Duration(i)*2*time.Second-time.Minute {
						t.Fatalf("count %d: time to live %v, the hold's was %v", i, pttl, pttl0)
					}
				}
			})
		}
	}
}

// TestReviewReshapeAcrossLayouts checks a key whose rule changes
// algorithm or window (the counter reshaped) while gateways of both
// layouts count on it in turn, the sliding log among them, against the
// memory store deciding the one stream of requests.
func TestReviewReshapeAcrossLayouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := []*limit.Params{
		reviewParams("sliding_window", 4, 10*time.Second),
		reviewParams("sliding_log", 3, 10*time.Second),
		reviewParams("fixed_window", 4, 10*time.Second),
		reviewParams("sliding_log", 3, 20*time.Second),
		reviewParams("token_bucket", 4, 10*time.Second),
		reviewParams("sliding_window", 3, 20*time.Second),
		reviewParams("leaky_bucket", 4, 10*time.Second),
	}
	rules[2].Lock = 15 * time.Second
	rules[3].Lock = 15 * time.Second
	for _, tt := range []struct {
		start   int
		evalsha bool
	}{{0, false}, {1, false}, {0, true}, {1, true}} {
		start := tt.start
		t.Run(fmt.Sprintf("%d/evalsha=%v", start, tt.evalsha), func(t *testing.T) {
			t.Parallel()
			mem := newTestMemory(t)
			clock := &fixedClock{}
			clock.us.Store(us0)
			stores := []*Store{}
			for _, layout := range []string{LayoutString, LayoutHash} {
				r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Leases: -1, Timeout: 10 * time.Second, Layout: layout})
				r.fixedNow = clock.us.Load
				if tt.evalsha {
					// As a script (EVALSHA), as to a Redis before 7.
					r.fn.off = true
					r.fn.on.Store(false)
				}
				stores = append(stores, r)
			}
			key := fmt.Sprintf("reshape|/%d/%v", start, tt.evalsha)
			now := us0
			for i := range 120 {
				rule := rules[(i/6)%len(rules)]
				red := stores[(start+i*5/3)%2]
				where := func() string { return fmt.Sprintf("request %d (%s, store %d)", i, rule.Algorithm, (start+i*5/3)%2) }
				sameDecision(t, mem, red, clock, now, limit.Request{Key: key, Params: rule}, where)
				now += 900_000
			}
		})
	}
}

// TestReviewCopiesKeepBudget checks that a batch's new keys made copies
// of its first (again) stay within the key budget: of six new callers
// with a budget of three keys, three get counters of their own (each
// counted once, the database then holding the budget and the overflow
// counter) and three count on the overflow counter, and a second batch at
// full budget copies nothing.
func TestReviewCopiesKeepBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := shortWayStore(t, srv.URL(), 3)
	ctx := context.Background()
	c := srv.Client()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	const over = "app|/|overflow"
	var batch []*batchCall
	for i := range 6 {
		batch = append(batch, shortWayCall(t, red, fmt.Sprintf("app|/|k%d", i), over, p))
	}
	red.runAsOne(ctx, batch)
	got := overflowed(t, batch)
	if want := []int64{0, 0, 0, 1, 1, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("overflowed %v, want %v", got, want)
	}
	if n := c.DBSize(ctx).Val(); n != 4 {
		t.Errorf("DBSIZE %d, want 4: 3 counters and the overflow counter", n)
	}
	for i := range 3 {
		k := redisKey("app", fmt.Sprintf("app|/|k%d", i))
		if f := counterFields(t, c, k); f["c"] != "1" {
			t.Errorf("k%d: %v, want a count of 1", i, f)
		}
		if c.PTTL(ctx, k).Val() <= 0 {
			t.Errorf("k%d has no time to live", i)
		}
		if batch[i].v[2] != 9 {
			t.Errorf("k%d: %d remaining, want 9", i, batch[i].v[2])
		}
	}
	if f := counterFields(t, c, redisKey("app", over)); f["c"] != "3" {
		t.Errorf("the overflow counter: %v, want a count of 3", f)
	}
	for i := 3; i < 6; i++ {
		if n := c.Exists(ctx, redisKey("app", fmt.Sprintf("app|/|k%d", i))).Val(); n != 0 {
			t.Errorf("k%d was made", i)
		}
	}
}

// TestReviewTemplateRewritten checks that a batch's template (its first
// new key) that a later call of the batch counts again, reshapes or
// deletes is not copied to the new keys after it: each new key holds
// its own one request in its own shape.
func TestReviewTemplateRewritten(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client()
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	other := &limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	for _, tt := range []struct {
		name  string
		again func(red *Store, key string) *batchCall
	}{
		{"counted again", func(red *Store, key string) *batchCall { return shortWayCall(t, red, key, "", p) }},
		{"reshaped", func(red *Store, key string) *batchCall { return shortWayCall(t, red, key, "", other) }},
		{"reshaped by a read", func(red *Store, key string) *batchCall {
			return respelled(shortWayCall(t, red, key, "", other), "1 g 0 0 0 0")
		}},
		{"held", func(red *Store, key string) *batchCall {
			return respelled(shortWayCall(t, red, key, "", p), "1 h 0 0 0 0")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			red := shortWayStore(t, srv.URL(), 0)
			first, next := "tpl|/"+tt.name+"/first", "tpl|/"+tt.name+"/next"
			batch := []*batchCall{
				shortWayCall(t, red, first, "", p),
				tt.again(red, first),
				shortWayCall(t, red, next, "", p),
			}
			red.runAsOne(ctx, batch)
			for i, b := range batch {
				if b.err != nil || b.v[0] != 1 {
					t.Fatalf("call %d: %v %v, want admitted", i, b.v, b.err)
				}
			}
			f := counterFields(t, c, redisKey("tpl", next))
			if f["_id"] != "sliding_window/60000000/10" || f["t"] != "1" || f["_h"] != "" {
				t.Fatalf("the next new key holds %v, want its own one request", f)
			}
			if batch[2].v[2] != 9 {
				t.Errorf("the next new key: %d remaining, want 9", batch[2].v[2])
			}
		})
	}
}

// TestReviewQueueAcrossLayouts checks requests that wait for room (Wait:
// a queue, "_a") and requests that do not, counted by gateways of both
// layouts in turn, against the memory store: the same decisions and the
// same delays.
func TestReviewQueueAcrossLayouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			mem := newTestMemory(t)
			clock := &fixedClock{}
			clock.us.Store(us0)
			stores := bothLayouts(t, srv, clock)
			p := reviewParams(alg, 3, 3*time.Second)
			key := "queue|/" + alg
			now, delayed := us0, 0
			for i := range 40 {
				q := limit.Request{Key: key, Params: p}
				if i%3 != 2 {
					q.Wait = 2 * time.Second
				}
				if i%7 == 5 {
					q.Act = limit.Defer
				}
				red := stores[(i*3/2)%2]
				mres, rres := make([]limit.Result, 1), make([]limit.Result, 1)
				if _, err := mem.Allow(ctx, time.Unix(0, now*1000), []limit.Request{q}, mres); err != nil {
					t.Fatal(err)
				}
				clock.us.Store(now)
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{q}, rres); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				m, r := mres[0], rres[0]
				// Up to a few µs: each instant reserved is rounded up to
				// Redis's µs, where memory counts in ns.
				if m.Allowed != r.Allowed || m.Remaining != r.Remaining || !nearUp(m.Delay, r.Delay, 3) ||
					!nearUp(m.RetryAfter, r.RetryAfter, 3) || !nearUp(m.Reset, r.Reset, 3) {
					t.Fatalf("request %d (%+v) at +%dµs: got %+v in redis, want %+v as in memory", i, q, now-us0, r, m)
				}
				if r.Delay > 0 {
					delayed++
				}
				now += 250_000
			}
			if delayed == 0 {
				t.Error("no request waited")
			}
		})
	}
}

// TestReviewCalendarAcrossLayouts checks a calendar day's limit counted
// by gateways of both layouts in turn across a day that is 23 hours
// long (Europe/Berlin's spring change), against the memory store.
func TestReviewCalendarAcrossLayouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	mem := newTestMemory(t)
	clock := &fixedClock{}
	stores := bothLayouts(t, srv, clock)
	p := calParams(3, limit.CalendarDay, "Europe/Berlin")
	start := local(ber, 2026, 3, 28, 20, 0, 0)
	admitted := 0
	for i := range 30 {
		at := start.Add(time.Duration(i) * 97 * time.Minute)
		q := limit.Request{Key: "calendar|/day", Params: p}
		mres, rres := make([]limit.Result, 1), make([]limit.Result, 1)
		if _, err := mem.Allow(ctx, at, []limit.Request{q}, mres); err != nil {
			t.Fatal(err)
		}
		clock.us.Store(at.UnixMicro())
		if _, err := stores[(i*2/3)%2].Allow(ctx, at, []limit.Request{q}, rres); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		m, r := mres[0], rres[0]
		if m.Allowed != r.Allowed || m.Remaining != r.Remaining || !nearUp(m.RetryAfter, r.RetryAfter, 0) || !nearUp(m.Reset, r.Reset, 0) {
			t.Fatalf("request %d at %v: got %+v in redis, want %+v as in memory", i, at, r, m)
		}
		if r.Allowed {
			admitted++
		}
	}
	// Three days, three requests each.
	if admitted != 9 {
		t.Errorf("admitted %d, want 9", admitted)
	}
}

// TestReviewHoldsAcrossLayouts checks holds, releases and counts on one
// key by gateways of both layouts in turn against the memory store: the
// same decisions for every hold and count (a release's own result is
// not compared, only what it leaves for the next request).
func TestReviewHoldsAcrossLayouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			mem := newTestMemory(t)
			clock := &fixedClock{}
			clock.us.Store(us0)
			stores := bothLayouts(t, srv, clock)
			rule := reviewParams(alg, 4, 3*time.Second)
			key := "holds|/" + alg
			now := us0
			acts := []limit.Act{limit.Hold, limit.Take, limit.Hold, limit.Release, limit.Take, limit.Hold, limit.Take, limit.Take, limit.Release}
			for i := range 60 {
				q := limit.Request{Key: key, Params: rule, Act: acts[i%len(acts)]}
				red := stores[(i*3/2)%2]
				mres, rres := make([]limit.Result, 1), make([]limit.Result, 1)
				if _, err := mem.Allow(ctx, time.Unix(0, now*1000), []limit.Request{q}, mres); err != nil {
					t.Fatal(err)
				}
				clock.us.Store(now)
				if _, err := red.Allow(ctx, time.Time{}, []limit.Request{q}, rres); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				m, r := mres[0], rres[0]
				if q.Act != limit.Release && (m.Allowed != r.Allowed || m.Remaining != r.Remaining || !nearUp(m.RetryAfter, r.RetryAfter, 0) || !nearUp(m.Reset, r.Reset, 0)) {
					t.Fatalf("request %d (%v, store %d) at +%dµs: got %+v in redis, want %+v as in memory", i, q.Act, (i*3/2)%2, now-us0, r, m)
				}
				now += 300_000
			}
		})
	}
}

// TestReviewLeaseReturnBothLayouts checks lease_return.lua on a counter
// kept as a string and as a hash: the tokens go back to the bucket they
// were counted in while the counter has that shape, the counter keeps
// its Redis type and its time to live, and a bucket that no longer
// counts, or another shape, gets nothing back.
func TestReviewLeaseReturnBothLayouts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const id = "sliding_window/10000000/10"
	for _, kind := range []string{"string", "hash"} {
		t.Run(kind, func(t *testing.T) {
			key := "gw:{lr}:" + kind
			if kind == "hash" {
				c.HSet(ctx, key, "_id", id, "h", "100", "t", "5", "9", "2", "1", "3")
			} else {
				setCounterFields(t, c, key, "_id", id, "h", "100", "t", "5", "9", "2", "1", "3")
			}
			c.PExpire(ctx, key, time.Hour)
			run := func(id string, bucket, n int64) int64 {
				t.Helper()
				v, err := leaseReturnScript.Run(ctx, c, []string{key}, id, bucket, n).Int64()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			// Bucket 100 is in slot 1 (a ring of 11), bucket 97 in slot 9.
			if got := run("fixed_window/10000000/0", 100, 1); got != 0 {
				t.Errorf("another shape: %d given back, want 0", got)
			}
			if got := run(id, 101, 1); got != 0 {
				t.Errorf("a bucket past the head: %d given back, want 0", got)
			}
			if got := run(id, 89, 1); got != 0 {
				t.Errorf("a bucket out of the ring: %d given back, want 0", got)
			}
			if got := run(id, 100, 5); got != 3 {
				t.Errorf("the head bucket: %d given back, want its 3", got)
			}
			if got := run(id, 97, 1); got != 1 {
				t.Errorf("bucket 97: %d given back, want 1", got)
			}
			f := counterFields(t, c, key)
			if f["t"] != "1" || f["9"] != "1" || (f["1"] != "" && f["1"] != "0") || f["_id"] != id || f["h"] != "100" {
				t.Errorf("the counter holds %v, want t 1, slot 9 1, slot 1 empty", f)
			}
			if typ := c.Type(ctx, key).Val(); typ != kind {
				t.Errorf("the counter is a %s, want a %s", typ, kind)
			}
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 59*time.Minute {
				t.Errorf("time to live %v, want the hour it had", ttl)
			}
		})
	}
}

// bothLayouts returns a store of each layout on srv (string, then hash),
// deciding at clock's instant, without deny cache or leases: gateways of
// both layouts, to take turns on one key.
func bothLayouts(t *testing.T, srv *redistest.Server, clock *fixedClock) []*Store {
	t.Helper()
	var stores []*Store
	for _, layout := range []string{LayoutString, LayoutHash} {
		r := newTestRedis(t, Config{URL: srv.URL(), DenyCacheSize: -1, Leases: -1, Timeout: 10 * time.Second, Layout: layout})
		r.fixedNow = clock.us.Load
		stores = append(stores, r)
	}
	return stores
}
