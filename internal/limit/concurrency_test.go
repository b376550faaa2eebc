package limit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// slotStep is one step of a slots table: acquire reqs (wantFull the index
// of the refusing request, -1 when taken), or release the lease of an
// earlier step.
type slotStep struct {
	name     string
	reqs     []SlotRequest
	wantFull int
	release  int // the step whose lease to release; -1 for none
}

// runSlotSteps runs steps against s and reports the failing step.
func runSlotSteps(t *testing.T, s Slots, steps []slotStep) []Lease {
	t.Helper()
	leases := make([]Lease, len(steps))
	for i, st := range steps {
		if st.release >= 0 {
			leases[st.release].Release()
			continue
		}
		l, full, err := s.Acquire(context.Background(), st.reqs)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.name, err)
		}
		if full != st.wantFull || (l == nil) != (st.wantFull >= 0) {
			t.Fatalf("step %d (%s): got full %d lease %v, want full %d", i, st.name, full, l != nil, st.wantFull)
		}
		leases[i] = l
	}
	return leases
}

// slotTable is the table both stores run: a rule of 2 in flight beside
// an app total of 3, per key.
func slotTable() []slotStep {
	total := SlotRequest{Key: "app-1|", Limit: 3}
	rule := SlotRequest{Key: "app-1|/up", Limit: 2}
	other := SlotRequest{Key: "app-1|/down", Limit: 2}
	both := []SlotRequest{total, rule}
	return []slotStep{
		{name: "first", reqs: both, wantFull: -1, release: -1},
		{name: "second", reqs: both, wantFull: -1, release: -1},
		{name: "third: the rule is full", reqs: both, wantFull: 1, release: -1},
		{name: "another rule: the total has room", reqs: []SlotRequest{total, other}, wantFull: -1, release: -1},
		{name: "the total is full", reqs: []SlotRequest{total, other}, wantFull: 0, release: -1},
		{name: "release the first", release: 0},
		{name: "a slot again", reqs: both, wantFull: -1, release: -1},
		{name: "released twice counts once", release: 0},
		{name: "full again", reqs: both, wantFull: 0, release: -1},
		{name: "release the rest", release: 1},
		{name: "release", release: 3},
		{name: "release", release: 6},
	}
}

func TestMemorySlots(t *testing.T) {
	t.Parallel()
	m := NewMemorySlots()
	runSlotSteps(t, m, slotTable())
	if n := m.Len(); n != 0 {
		t.Errorf("keys after every release: got %d, want 0", n)
	}
	if _, _, err := m.Acquire(context.Background(), []SlotRequest{{Key: "k", Limit: 0}}); err == nil {
		t.Error("limit 0: got no error")
	}
}

// TestMemorySlotsNeverOverLimit is the guarantee: however acquisitions and
// releases interleave, no key ever has more than its limit in flight, and
// every count returns to 0.
func TestMemorySlotsNeverOverLimit(t *testing.T) {
	t.Parallel()
	m := NewMemorySlots()
	const limit = 3
	var held [4]atomic.Int64
	var over atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				k := rng.IntN(len(held))
				l, _, err := m.Acquire(context.Background(), []SlotRequest{{Key: fmt.Sprint(k), Limit: limit}})
				if err != nil {
					t.Error(err)
					return
				}
				if l == nil {
					continue
				}
				if held[k].Add(1) > limit {
					over.Add(1)
				}
				held[k].Add(-1)
				l.Release()
			}
		})
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Errorf("a key had more than %d in flight %d times", limit, over.Load())
	}
	if n := m.Len(); n != 0 {
		t.Errorf("keys after every release: got %d, want 0", n)
	}
}

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

func newTestSlots(t *testing.T, r *Redis, ttl time.Duration) *RedisSlots {
	t.Helper()
	// Renewals only when the test asks (RenewNow): the ticker's would
	// move nothing on a fixed clock, but keep them out of the way.
	s, err := NewRedisSlots(r, RedisSlotsConfig{TTL: ttl, Renew: ttl - time.Millisecond})
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
	runSlotSteps(t, s, slotTable())
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
	one := []SlotRequest{{Key: "app-1|/up", Limit: 2}}
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
	step := func(d time.Duration, wantTaken bool, what string) Lease {
		t.Helper()
		clock.us.Add(d.Microseconds())
		l, _, err := live.Acquire(ctx, one)
		if err != nil || (l != nil) != wantTaken {
			t.Fatalf("%s: got lease %v (%v), want %v", what, l != nil, err, wantTaken)
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
	r := newTestRedis(t, RedisConfig{URL: "redis://127.0.0.1:1", Timeout: time.Second, DialTimeout: 100 * time.Millisecond})
	s := newTestSlots(t, r, time.Minute)
	l, full, err := s.Acquire(context.Background(), []SlotRequest{{Key: "app-1|/up", Limit: 2}})
	if err == nil || l != nil || full != -1 {
		t.Errorf("got lease %v full %d err %v, want an error", l != nil, full, err)
	}
}
