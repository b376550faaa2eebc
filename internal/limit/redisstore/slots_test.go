package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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

// TestRedisSlotsStall: a slot taken by a call that Redis did not answer
// in time (it stalled), and that Redis runs when it wakes, is released
// then, not left held with nothing in flight until its TTL. The
// breaker opens on the first failure here, as a stall under load opens
// it, so that the release cannot go at once.
func TestRedisSlotsStall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	r := newTestRedis(t, Config{URL: srv.URL(), Timeout: 200 * time.Millisecond, BreakerThreshold: 1})
	s := newTestSlots(t, r, time.Hour)
	req := []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 3}}
	// Once before the stall, so that Redis knows the scripts (EVALSHA).
	l, _, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	sleeping := make(chan error, 1)
	go func() { sleeping <- srv.Client().Do(ctx, "DEBUG", "SLEEP", "2").Err() }()
	eventually.True(t, 10*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return r.client.Ping(pctx).Err() != nil
	}, "Redis did not go to sleep")
	if l, _, err := s.Acquire(ctx, req); err == nil {
		l.Release()
		t.Fatal("a slot taken while Redis sleeps: want a timeout")
	}
	if err := <-sleeping; err != nil {
		t.Fatal(err)
	}
	slotsFreed(t, s, "app-1", "app-1|/up", "the slot of the call Redis ran after its stall is still held")
}

// TestRedisSlotReleasedFirst: a release that Redis runs before the call
// that took the slot (both were sent to a stalled Redis, and it ran them
// in the other order) leaves word of it, so that the call takes nothing
// when it runs; a slot released in the usual way leaves none.
func TestRedisSlotReleasedFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	r, _ := newFixedRedis(t, srv)
	s := newTestSlots(t, r, time.Hour)
	l := &slotPermit{s: s, n: 1, member: "early", unsure: true}
	l.keys[0] = SlotKey("app-1", "app-1|/up")
	l.released.Store(true)
	if !l.releaseOnce() {
		t.Fatal("the release did not run")
	}
	v, err := slotAcquireScript.Run(ctx, r.short, l.keys[:1], s.nowArg(), s.ttl, l.member, 3).Int64()
	if err != nil || v != -1 {
		t.Fatalf("the call after its release: %d %v, want -1 (took nothing)", v, err)
	}
	if n, err := s.SlotCount(ctx, "app-1", "app-1|/up"); err != nil || n != 0 {
		t.Fatalf("slots held: %d %v, want 0", n, err)
	}
	// The word of the release is no slot: three more requests get one.
	var held []limit.Permit
	for i := range 3 {
		p, full, err := s.Acquire(ctx, []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 3}})
		if err != nil || p == nil {
			t.Fatalf("request %d: %v %d %v, want a slot", i+1, p, full, err)
		}
		held = append(held, p)
	}
	if n, err := s.SlotCount(ctx, "app-1", "app-1|/up"); err != nil || n != 3 {
		t.Fatalf("slots held: %d %v, want 3", n, err)
	}
	for _, p := range held {
		p.Release()
	}
	if n := srv.Client().ZCard(ctx, SlotKey("app-1", "app-1|/up")).Val(); n != 1 {
		t.Errorf("members after the usual releases: %d, want only the word of the early one", n)
	}
}

// TestRedisSlotsMoved: a slot whose Redis Cluster slot moved to another
// node while its request was in flight (a reshard) is released there:
// the release that meets MOVED is sent again once the client has the new
// slot map, not dropped, which would leave the slot held until its TTL.
func TestRedisSlotsMoved(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	r := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 2 * time.Second})
	s := newTestSlots(t, r, time.Hour)
	l, _, err := s.Acquire(ctx, []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 3}})
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v %v", l, err)
	}
	key := SlotKey("app-1", "app-1|/up")
	slot, src, dst := slotNodes(t, cl, key)
	// Move the slot, as redis-cli --cluster reshard does.
	srcID, dstID := src.Client().ClusterMyID(ctx).Val(), dst.Client().ClusterMyID(ctx).Val()
	host, port, _ := strings.Cut(dst.Addr, ":")
	clusterSteps(t, []clusterStep{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
		{src, []any{"MIGRATE", host, port, "", 0, 5000, "KEYS", key}},
		{dst, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
	})
	if n := dst.Client().ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("slots on the new node: %d, want the 1 held", n)
	}
	l.Release()
	eventually.True(t, 30*time.Second, func() bool { return dst.Client().ZCard(ctx, key).Val() == 0 },
		"the slot is still held on the node its Cluster slot moved to")
}

// TestRedisSlotsClusterRefused: a cluster node that refuses a slot's
// call (CLUSTERDOWN here: the slot is served by no node) did not run it,
// so nothing is released for it; and while a Cluster slot is being
// migrated, a slot key still on its node is taken there, as before the
// migration (the call names only the slot keys: a key missing there
// would make it TRYAGAIN).
func TestRedisSlotsClusterRefused(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	ctx := context.Background()
	r := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 2 * time.Second})
	s := newTestSlots(t, r, time.Hour)
	req := []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 100}}
	l, _, err := s.Acquire(ctx, req) // the slot key exists from now on
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v %v", l, err)
	}
	key := SlotKey("app-1", "app-1|/up")
	slot, src, dst := slotNodes(t, cl, key)
	srcID, dstID := src.Client().ClusterMyID(ctx).Val(), dst.Client().ClusterMyID(ctx).Val()
	clusterSteps(t, []clusterStep{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
	})
	for i := range 3 {
		p, full, err := s.Acquire(ctx, req)
		if err != nil || p == nil {
			t.Fatalf("request %d while the slot migrates: %v %d %v, want a slot on the node that holds its key", i+1, p, full, err)
		}
		p.Release()
	}
	l.Release()
	clusterSteps(t, []clusterStep{
		{src, []any{"CLUSTER", "SETSLOT", slot, "STABLE"}},
		{dst, []any{"CLUSTER", "SETSLOT", slot, "STABLE"}},
		{src, []any{"CLUSTER", "DELSLOTS", slot}},
	})
	calls := r.Stats().Calls
	for i := range 10 {
		if p, _, err := s.Acquire(ctx, req); err == nil {
			p.Release()
			t.Fatalf("request %d: a slot of a Cluster slot no node serves", i+1)
		}
	}
	if n := s.releasing.Load(); n != 0 {
		t.Errorf("%d releases sent for calls the cluster refused, want none", n)
	}
	if n := r.Stats().Calls - calls; n != 10 {
		t.Errorf("%d calls for 10 refused requests, want 10", n)
	}
}

// slotNodes returns the Cluster slot of key, the node that holds key
// (src) and another master (dst).
func slotNodes(t *testing.T, cl *redistest.Cluster, key string) (slot int64, src, dst *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	slot = cl.Nodes[0].Client().ClusterKeySlot(ctx, key).Val()
	for _, n := range cl.Nodes {
		if n.Client().ClusterCountKeysInSlot(ctx, int(slot)).Val() > 0 {
			src = n
		} else if dst == nil {
			dst = n
		}
	}
	if src == nil || dst == nil {
		t.Fatalf("the key %q is on no node", key)
	}
	return slot, src, dst
}

// clusterStep is a command for one node of a cluster.
type clusterStep struct {
	n    *redistest.Server
	args []any
}

// clusterSteps runs steps in order, and fails t at the first error.
func clusterSteps(t *testing.T, steps []clusterStep) {
	t.Helper()
	for _, step := range steps {
		if err := step.n.Client().Do(context.Background(), step.args...).Err(); err != nil {
			t.Fatalf("%v: %v", step.args, err)
		}
	}
}

// TestRedisSlotsClosedConnSentAgain: a slot call whose connection closed
// after Redis ran it (CLIENT KILL, a connection of the pool closed under
// it) is sent again, as a decision is, and Redis takes its slot once:
// with a limit of 1 the call again finds its own slot, not a full key.
// Its release then clears the slot. (The call failed to the fail mode.)
func TestRedisSlotsClosedConnSentAgain(t *testing.T) {
	t.Parallel()
	srv, path, s := slotsOnPath(t)
	ctx := context.Background()
	req := []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 1}}
	// Once before, so that Redis knows the script (EVALSHA).
	l, _, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	slotsFreed(t, s, "app-1", "app-1|/up", "the first slot is still held")
	// The call's answer is held back until its connection is closed.
	hold := make(chan struct{})
	defer close(hold)
	path.SetDelay(func() time.Duration { <-hold; return 0 })
	type acquired struct {
		l    limit.Permit
		full int
		err  error
	}
	got := make(chan acquired, 1)
	go func() {
		l, full, err := s.Acquire(ctx, req)
		got <- acquired{l, full, err}
	}()
	eventually.True(t, 10*time.Second, func() bool {
		n, err := srv.Client().ZCount(ctx, "gwc:{app-1}:/up", "(0", "+inf").Result()
		return err == nil && n == 1
	}, "Redis did not take the slot")
	path.SetDelay(nil)
	path.Reset()
	a := <-got
	if a.err != nil || a.l == nil || a.full != -1 {
		t.Fatalf("after its connection closed: permit %v, full %d, err %v; want the slot, taken once", a.l != nil, a.full, a.err)
	}
	if n, err := srv.Client().ZCount(ctx, "gwc:{app-1}:/up", "(0", "+inf").Result(); err != nil || n != 1 {
		t.Errorf("%d slots held (%v), want 1", n, err)
	}
	a.l.Release()
	slotsFreed(t, s, "app-1", "app-1|/up", "the slot is still held after its release")
}

// TestRedisSlotsClientFailsFast: the concurrency slots' client is set as
// the decisions' client is where a call's failure must come at once (one
// dial, no retries; no CLIENT SETINFO, no maintenance notifications): it
// was built before those were set, and a refused connection took five
// dials, 0.4s, per slot call.
func TestRedisSlotsClientFailsFast(t *testing.T) {
	t.Parallel()
	r := newTestRedis(t, Config{URL: "redis://127.0.0.1:1", Timeout: time.Second, DialTimeout: 100 * time.Millisecond})
	short, ok := r.short.(*redis.Client)
	if !ok || r.short == r.client {
		t.Fatalf("the slots' client is %T, the decisions' own: %v", r.short, r.short == r.client)
	}
	o := short.Options()
	if o.DialerRetries != 1 || o.MaxRetries > 0 || !o.DisableIdentity ||
		o.MaintNotificationsConfig == nil || o.MaintNotificationsConfig.Mode != maintnotifications.ModeDisabled {
		t.Errorf("the slots' client: DialerRetries %d, MaxRetries %d, DisableIdentity %v, maintenance notifications %+v; want 1, none, true, disabled",
			o.DialerRetries, o.MaxRetries, o.DisableIdentity, o.MaintNotificationsConfig)
	}
}

// TestRedisSlotsRefusedWhenSentAgain: a slot call whose connection closed
// while its first send was still on its way to Redis, sent again and
// refused (the key full), returns no permit; when the first send then
// runs, after the key has room, it takes nothing: the refusal left word
// of its release. (It took a slot that no permit held until the slot's
// TTL.)
func TestRedisSlotsRefusedWhenSentAgain(t *testing.T) {
	t.Parallel()
	_, path, s := slotsOnPath(t)
	ctx := context.Background()
	req := []limit.SlotRequest{{Key: "app-1|/up", Tag: "app-1", Limit: 1}}
	other, _, err := s.Acquire(ctx, req) // holds the only slot
	if err != nil || other == nil {
		t.Fatalf("the first slot: %v", err)
	}
	held := path.HoldNext()
	l, full, err := s.Acquire(ctx, req)
	if err != nil || l != nil || full != 0 {
		t.Fatalf("sent again while the key is full: permit %v, full %d, err %v; want refused, the key full", l != nil, full, err)
	}
	first := <-held
	other.Release()
	eventually.True(t, 10*time.Second, func() bool {
		n, err := s.SlotCount(ctx, "app-1", "app-1|/up")
		return err == nil && n == 0 && s.releasing.Load() == 0
	}, "the slots are not all released")
	reply, err := path.SendLate(first)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.SlotCount(ctx, "app-1", "app-1|/up"); err != nil || n != 0 {
		t.Errorf("the first send, run late (reply %q), holds %d slots (%v) that no permit does; want none", reply, n, err)
	}
	if l, _, err := s.Acquire(ctx, req); err != nil || l == nil {
		t.Errorf("a new request: permit %v, err %v; want the slot", l != nil, err)
	} else {
		l.Release()
	}
}

// slotsFreed waits until key (of tag) holds no slot in s, and fails the
// test with what otherwise.
func slotsFreed(t *testing.T, s *Slots, tag, key, what string) {
	t.Helper()
	eventually.True(t, 30*time.Second, func() bool {
		n, err := s.SlotCount(context.Background(), tag, key)
		return err == nil && n == 0
	}, "%s", what)
}

// slotsOnPath returns a Redis server, a path to it, and the Slots (an
// hour's TTL) of a store that reaches it through the path, whose callers
// wait up to 10s.
func slotsOnPath(t *testing.T) (*redistest.Server, *redistest.Path, *Slots) {
	t.Helper()
	srv := redistest.Start(t)
	path := redistest.NewPath(t, srv)
	r := newTestRedis(t, Config{URL: path.URL(), Timeout: 10 * time.Second})
	return srv, path, newTestSlots(t, r, time.Hour)
}
