package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestKnownBucketLine: what Redis said of a bucket it denied holds until
// the bucket is full again, its room on the refill line from then (a
// window's is forgotten once the denied request would be admitted), and
// while the line has yet to bring a whole token back, RetryAfter is when
// it does, not the bucket's reset.
func TestKnownBucketLine(t *testing.T) {
	epoch := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	now := epoch
	r := &Store{known: newKnown(16), epoch: epoch, now: func() time.Time { return now }}
	// 10 per 10s, a burst of 10: a token a second, full 10s after empty.
	bucket := &limit.Params{Algorithm: "token_bucket", Limit: 10, Window: 10 * time.Second, Burst: 10}
	window := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: 10 * time.Second, Precision: 10}
	for _, p := range []*limit.Params{bucket, window} {
		q := limit.Request{Key: p.Algorithm + "|/", Params: p}
		// Denied at once: empty, a token back in 1s (the denied
		// request's), full in 10s.
		r.known.record([]limit.Request{q}, []limit.Result{{Remaining: 0, Reset: 10 * time.Second, RetryAfter: time.Second}}, r.clock())
		for _, tc := range []struct {
			at          time.Duration
			known       bool
			used        int64
			retry       time.Duration
			description string
		}{
			{500 * time.Millisecond, true, 10, 500 * time.Millisecond, "before the instant Redis gave"},
			{2500 * time.Millisecond, p == bucket, 8, 0, "two tokens back"},
			{9 * time.Second, p == bucket, 1, 0, "nine back"},
			{10 * time.Second, false, 0, 0, "full again"},
		} {
			now = epoch.Add(tc.at)
			k, ok := r.Known(&q)
			if ok != tc.known {
				t.Errorf("%s, %s: known %v, want %v", p.Algorithm, tc.description, ok, tc.known)
				continue
			}
			if ok && (k.Used != tc.used || k.RetryAfter != tc.retry) {
				t.Errorf("%s, %s: used %d, retry after %v; want %d, %v", p.Algorithm, tc.description, k.Used, k.RetryAfter, tc.used, tc.retry)
			}
		}
		now = epoch
	}
	// Denied for a request whose retry came before a whole token (a cost
	// below one is not possible; a Redis that said so, or a reload that
	// made the bucket bigger): retry when the line brings one back.
	q := limit.Request{Key: "short|/", Params: bucket}
	r.known.record([]limit.Request{q}, []limit.Result{{Remaining: 0, Reset: 10 * time.Second, RetryAfter: 100 * time.Millisecond}}, r.clock())
	now = epoch.Add(500 * time.Millisecond)
	if k, ok := r.Known(&q); !ok || k.Used != 10 || k.RetryAfter != 500*time.Millisecond {
		t.Errorf("between the instant Redis gave and a whole token: %+v %v, want used 10, retry after 500ms", k, ok)
	}
}

// TestKnownBehindQueue: what Redis says of a limit with room reserved
// ahead (maxDelay) holds until the queue has passed. A bucket refused
// behind a queue that ends in 5s (Reset and RetryAfter run from now, the
// queue longer) or that admitted a request at a reserved instant 5s ahead
// (Remaining and Reset as of that instant) has no room until the queue's
// end, and refills on its line from there; a window refused behind it
// stays refused until the instant Redis gave.
func TestKnownBehindQueue(t *testing.T) {
	epoch := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	now := epoch
	r := &Store{known: newKnown(16), epoch: epoch, now: func() time.Time { return now }}
	// 10 per 10s, a burst of 10: a token a second, full 10s after empty.
	bucket := &limit.Params{Algorithm: "token_bucket", Limit: 10, Window: 10 * time.Second, Burst: 10}
	window := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: 10 * time.Second, Precision: 10}
	for _, tc := range []struct {
		name string
		p    *limit.Params
		res  limit.Result
	}{
		{"bucket refused behind the queue", bucket, limit.Result{Reset: 15 * time.Second, RetryAfter: 6 * time.Second}},
		{"bucket admitted at the queue's end", bucket, limit.Result{Allowed: true, Reset: 10 * time.Second, Delay: 5 * time.Second}},
		{"window refused behind the queue", window, limit.Result{Reset: 15 * time.Second, RetryAfter: 6 * time.Second}},
	} {
		// Full until the queue's end (5s); then a bucket refills a token
		// a second, and a window is not known once the refused request
		// would be admitted (6s).
		checks := []struct {
			at    time.Duration
			known bool
			used  int64
		}{{2500 * time.Millisecond, true, 10}, {5 * time.Second, true, 10}, {7500 * time.Millisecond, tc.p == bucket, 8}, {15 * time.Second, false, 0}}
		q := limit.Request{Key: tc.name, Params: tc.p}
		now = epoch
		r.known.record([]limit.Request{q}, []limit.Result{tc.res}, r.clock())
		for _, c := range checks {
			now = epoch.Add(c.at)
			k, ok := r.Known(&q)
			if ok != c.known || (ok && k.Used != c.used) {
				t.Errorf("%s, at %v: known %v, used %d; want %v, %d", tc.name, c.at, ok, k.Used, c.known, c.used)
			}
		}
	}
}

// TestKnownAfterRead: a read of a counter (the usage endpoint's
// limit.Read) does not change what is known of it. A bucket of 1 a
// second with a request reserved 1s ahead has its next token at 2s, and
// so it is known to be full at 1.5s, before a read of it and after.
func TestKnownAfterRead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, c := newFixedRedis(t, srv)
	t0 := c.us.Load()
	red.now = func() time.Time { return time.UnixMicro(c.us.Load()) }
	red.epoch = time.UnixMicro(t0 - time.Second.Microseconds())
	p := &limit.Params{Algorithm: "token_bucket", Limit: 1, Window: time.Second}
	q := limit.Request{Key: "k", Tag: "app", Params: p, Wait: 5 * time.Second}
	allow := func(q limit.Request) limit.Result {
		t.Helper()
		res := make([]limit.Result, 1)
		if _, err := red.Allow(context.Background(), time.UnixMicro(c.us.Load()), []limit.Request{q}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := allow(q); !r.Allowed || r.Delay != 0 {
		t.Fatalf("the first request: %+v, want admitted at once", r)
	}
	if r := allow(q); !r.Allowed || r.Delay != time.Second {
		t.Fatalf("the second: %+v, want admitted 1s ahead", r)
	}
	at := func(d time.Duration) (Known, bool) {
		c.us.Store(t0 + d.Microseconds())
		defer c.us.Store(t0)
		return red.Known(&q)
	}
	if k, ok := at(1500 * time.Millisecond); !ok || k.Used != 1 {
		t.Fatalf("at 1.5s, after the reservation: %+v %v, want known and full", k, ok)
	}
	allow(limit.Request{Key: "k", Tag: "app", Params: p, Act: limit.Read})
	if k, ok := at(1500 * time.Millisecond); !ok || k.Used != 1 {
		t.Errorf("at 1.5s, after a read: %+v %v, want known and full, as before it", k, ok)
	}
}
