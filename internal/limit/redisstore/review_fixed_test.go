package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestReviewLiftedLockoutString checks, in the string layout, a lockout
// that a reload lifted (the rule without Lock) on a call that was denied,
// which wrote nothing else: when the rule locks out again, the lifted
// lockout must not be back in force (the memory store decides alike).
func TestReviewLiftedLockoutString(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sec := int64(time.Second / time.Microsecond)
	for _, alg := range []string{"token_bucket", "leaky_bucket", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			red, clock := reviewStore(t, srv, LayoutString)
			pair := newStorePair(t, red, clock)
			lock := reviewParams(alg, 2, 60*time.Second)
			lock.Lock = 60 * time.Second
			free := *lock
			free.Lock = 0
			key := "failift|/" + alg
			for i, s := range []struct {
				at int64
				p  *limit.Params
			}{{0, lock}, {0, lock}, {0, lock}, {12, &free}, {31, lock}, {45, lock}, {59, lock}, {61, lock}} {
				pair.allow(us0+s.at*sec, []limit.Request{{Key: key, Params: s.p}}, func() string { return fmt.Sprintf("step %d at %ds", i, s.at) })
			}
		})
	}
}

// TestReviewSameKeyStringThenLog checks one key named twice in a call, a
// string algorithm's limit and then a sliding log's (a hash): the call is
// decided, not refused by Redis (WRONGTYPE).
func TestReviewSameKeyStringThenLog(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, _ := reviewStore(t, srv, LayoutString)
	for _, first := range []string{"fixed_window", "sliding_window", "token_bucket"} {
		key := "failtwo|/" + first
		reqs := []limit.Request{{Key: key, Params: reviewParams(first, 5, 10*time.Second)}, {Key: key, Params: reviewParams("sliding_log", 3, 10*time.Second)}}
		for i := range 3 {
			if _, err := red.Allow(context.Background(), time.Time{}, reqs, make([]limit.Result, 2)); err != nil {
				t.Fatalf("%s, call %d: %v", first, i, err)
			}
		}
	}
}

// TestReviewGarbageMsgpack checks counters that hold MessagePack that is
// not a counter's map (an array, a NaN, a boolean or a nested map): each
// is decided as a new key, as memory decides it, in either layout.
func TestReviewGarbageMsgpack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	for _, tt := range []struct{ layout, alg, name, g string }{
		{LayoutString, "sliding_window", "array", "\x93\x01\x02\x03"},
		{LayoutString, "fixed_window", "NaN", "\x81\xa2_x\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"},
		{LayoutString, "fixed_window", "NaN with a shape", "\x82\xa3_id\xa1x\xa2_x\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"},
		{LayoutHash, "fixed_window", "bool", "\x81\xa1z\xc3"},
		{LayoutHash, "fixed_window", "nested", "\x81\xa1z\x81\xa1a\x01"},
	} {
		t.Run(tt.layout+"/"+tt.alg+"/"+tt.name, func(t *testing.T) {
			red, clock := reviewStore(t, srv, tt.layout)
			mem := newTestMemory(t)
			q := limit.Request{Key: "failgarbage|/" + tt.layout + tt.name, Params: reviewParams(tt.alg, 3, 10*time.Second)}
			keys, _, _, err := redisKeys([]limit.Request{q})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, keys[0], tt.g, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				sameDecision(t, mem, red, clock, us0+int64(i)*1000, q, func() string { return fmt.Sprintf("request %d", i) })
			}
		})
	}
}

// TestReviewEmptyFieldName checks a hash counter with a field named ""
// (which no gateway writes), read by the string layout: decided, not an
// error.
func TestReviewEmptyFieldName(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	red, _ := reviewStore(t, srv, LayoutString)
	q := limit.Request{Key: "failempty|/a", Params: reviewParams("fixed_window", 3, 10*time.Second)}
	keys, _, _, err := redisKeys([]limit.Request{q})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, keys[0], "", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := red.Allow(ctx, time.Time{}, []limit.Request{q}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
}
