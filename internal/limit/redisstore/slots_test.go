package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestSlotKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, tag, key, want string }{
		{name: "app rule", key: "app-1|/v1/up", want: "gwc:{app-1}:/v1/up"},
		{name: "app total", key: "app-1|", want: "gwc:{app-1}:"},
		{name: "per ip", tag: "*|203.0.113.7", key: "*|/|203.0.113.7", want: "gwc:{*|203.0.113.7}|*|/|203.0.113.7"},
	}
	for _, tt := range tests {
		if got := SlotKey(tt.tag, tt.key); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func newTestSlots(t *testing.T, r *Store, ttl time.Duration) *Slots {
	t.Helper()
	// Renewals only when the test asks (RenewNow): the ticker's would
	// move nothing on a fixed clock, but keep them out of the way.
	s, err := NewSlots(r, SlotsConfig{TTL: ttl, Renew: ttl - time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestRedisSlots(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r, _ := newFixedRedis(t, srv)
	s := newTestSlots(t, r, time.Hour)
	limittest.RunSlotSteps(t, s, limittest.SlotTable())
	if keys := srv.Client().Keys(context.Background(), "gwc:*").Val(); len(keys) != 0 {
		t.Errorf("keys after every release: got %q, want none", keys)
	}
}

// TestRedisSlotsExpire checks that the slots of a gateway that stopped
// without releasing them (a crash) are freed after the TTL, that
// renewing keeps a live request's slot past it, and that its key
// expires on its own.
func TestRedisSlotsExpire(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	r, clock := newFixedRedis(t, srv)
	const ttl = 10 * time.Second
	dead := newTestSlots(t, r, ttl)
	one := []limit.SlotRequest{{Key: "app-1|/up", Limit: 2}}
	for range 2 {
		if l, _, err := dead.Acquire(ctx, one); err != nil || l == nil {
			t.Fatalf("acquire: %v %v", l, err)
		}
	}
	dead.Close() // dies holding both slots
	pttl := srv.Client().PTTL(ctx, SlotKey("", "app-1|/up")).Val()
	if pttl <= 0 || pttl > ttl+time.Millisecond {
		t.Errorf("the key's expiry: got %s, want in (0, %s]", pttl, ttl)
	}

	live := newTestSlots(t, r, ttl)
	step := func(d time.Duration, wantTaken bool, what string) limit.Permit {
		t.Helper()
		clock.us.Add(d.Microseconds())
		l, _, err := live.Acquire(ctx, one)
		if err != nil || (l != nil) != wantTaken {
			t.Fatalf("%s: got permit %v (%v), want %v", what, l != nil, err, wantTaken)
		}
		return l
	}
	step(ttl-time.Microsecond, false, "just before the dead slots expire")
	held := step(time.Microsecond, true, "when they expire")
	// Renew the held slot just before it expires; it then outlives its
	// first expiry.
	clock.us.Add((ttl - time.Second).Microseconds())
	if err := live.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	second := step(2*time.Second, true, "after the first expiry, the renewed slot holds one")
	step(0, false, "both held")
	held.Release()
	second.Release()
	if n, err := live.SlotCount(ctx, "", "app-1|/up"); err != nil || n != 0 {
		t.Errorf("slots after release: got %d (%v), want 0", n, err)
	}
	if keys := srv.Client().Keys(ctx, "gwc:*").Val(); len(keys) != 0 {
		t.Errorf("keys after every release: got %q, want none", keys)
	}
}

// TestRedisSlotsDown checks that an unreachable Redis is an error, not a
// refusal, so that the fail mode decides.
func TestRedisSlotsDown(t *testing.T) {
	t.Parallel()
	r := newTestRedis(t, Config{URL: "redis://127.0.0.1:1", Timeout: time.Second, DialTimeout: 100 * time.Millisecond})
	s := newTestSlots(t, r, time.Minute)
	l, full, err := s.Acquire(context.Background(), []limit.SlotRequest{{Key: "app-1|/up", Limit: 2}})
	if err == nil || l != nil || full != -1 {
		t.Errorf("got permit %v full %d err %v, want an error", l != nil, full, err)
	}
}
