package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/redis/go-redis/v9"
)

// DefaultSlotTTL is the default SlotsConfig.TTL: the gateway's
// default --upstream-timeout.
const DefaultSlotTTL = 30 * time.Second

// SlotsConfig configures Slots.
type SlotsConfig struct {
	// TTL is how long a slot lives unless it is renewed or released: a
	// gateway that dies frees its slots after at most this long. The
	// server sets it to --upstream-timeout. Default DefaultSlotTTL; at
	// least 10ms.
	TTL time.Duration
	// Renew is how often the slots of requests still in flight are
	// renewed for another TTL. Default TTL / 3, so that a slot survives
	// two failed renewals; it must be below TTL.
	Renew time.Duration
	// OnError, if not nil, is called with the error of a renewal that
	// failed (from the renewing goroutine).
	OnError func(error)
}

// Slots is the Slots of a Redis store (docs/algorithms.md, "Concurrency:
// requests in flight"): each key is a sorted set "gwc:{tag}:rest" beside
// the counters, in the same Redis Cluster slot (its tag is the
// counter's), whose members are the slots held, each scored with the
// instant (µs, Redis's clock) it expires. Acquire prunes the expired
// members before it counts, so the slots of a gateway that died are freed
// after TTL; one goroutine renews the slots of every request still in
// flight each Renew, one pipelined call per Redis node with one command
// per key. Calls go through the store's per-node circuit breakers.
//
// Create it with NewSlots and stop its renewals with Close. It is
// safe for concurrent use.
type Slots struct {
	r      *Store
	ttl    int64 // µs
	renew  time.Duration
	prefix string // of slot IDs: the fleet ID, unique to this process, and the Slots' number in it (slotsMade)
	seq    atomic.Uint64
	onErr  func(error)

	mu   sync.Mutex
	live map[*slotPermit]struct{}
	// releasing counts the releases being sent in the background: after
	// a call that took slots was not answered, or a release Redis did
	// not answer (retry).
	releasing atomic.Int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ limit.Slots = (*Slots)(nil)

// NewSlots returns the Slots of r and starts renewing.
func NewSlots(r *Store, cfg SlotsConfig) (*Slots, error) {
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultSlotTTL
	}
	if ttl < 10*time.Millisecond {
		return nil, fmt.Errorf("redis slot ttl %s is below 10ms", ttl)
	}
	renew := cfg.Renew
	if renew == 0 {
		renew = ttl / 3
	}
	if renew <= 0 || renew >= ttl {
		return nil, fmt.Errorf("redis slot renewal %s is not in (0, ttl %s)", renew, ttl)
	}
	s := &Slots{
		r: r, ttl: micros(ttl), renew: renew, prefix: r.fleet.id + ":" + strconv.FormatUint(slotsMade.Add(1), 36) + ":", onErr: cfg.OnError,
		live: map[*slotPermit]struct{}{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go s.run()
	return s, nil
}

// slotsMade numbers the Slots of this process, so that two on one store
// (one fleet ID) never give two slots one ID: a slot call sent again
// takes nothing when it finds its ID held (slotAcquireLua).
var slotsMade atomic.Uint64

// Close stops the renewals. Slots still held are neither renewed nor
// released: they expire after TTL, as a dead gateway's do.
func (s *Slots) Close() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// slotAcquireLua takes a slot of every key of KEYS, or none. ARGV[1] is
// "" (read TIME) or a fixed instant (µs, tests), ARGV[2] the slot's TTL
// (µs), ARGV[3] the slot's ID, ARGV[3+i] the limit of KEYS[i]. It returns
// 0 when the slots were taken, else the index of the first full key; -1,
// taking nothing, when the slot was released before the call ran: its
// caller stopped waiting for it, and the release left word of it in the
// first key (slotReleaseLua). A call sent again after its connection
// closed (Acquire) may find its slots taken by its first send: it returns
// 0 then, taking nothing more.
//
// A key's members are its slots, each scored with the instant it
// expires, and such words, "~" and the slot's ID, scored with the
// negated instant they expire: one range, from -now to now, holds every
// member that expired, and once it is gone the slots held are the
// members above 0.
const slotAcquireLua = `
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local ttl = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], '~' .. ARGV[3]) then
  return -1
end
local held = redis.call('ZSCORE', KEYS[1], ARGV[3])
if held and tonumber(held) > now then
  return 0
end
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, -now, now)
  local need = 1
  for j = 1, i - 1 do
    if KEYS[j] == k then need = need + 1 end
  end
  if redis.call('ZCOUNT', k, '(0', '+inf') + need > tonumber(ARGV[3 + i]) then
    return i
  end
end
for i, k in ipairs(KEYS) do
  local m = ARGV[3]
  for j = 1, i - 1 do
    if KEYS[j] == k then m = m .. '#' .. i end
  end
  redis.call('ZADD', k, now + ttl, m)
  redis.call('PEXPIRE', k, math.ceil(ttl / 1000) + 1)
end
return 0
`

// slotReleaseLua removes the slot ARGV[1] (and its twins, see
// slotAcquireLua) from every key of KEYS; an empty set disappears. When
// ARGV[3] (µs) is not 0 — the call that took the slot was not answered,
// and may not have run yet — it also leaves word of the release in the
// first key for that long (see slotAcquireLua), so that the call, should
// it run later, takes nothing. ARGV[2] is as slotAcquireLua's ARGV[1].
const slotReleaseLua = `
for i, k in ipairs(KEYS) do
  local m = ARGV[1]
  for j = 1, i - 1 do
    if KEYS[j] == k then m = m .. '#' .. i end
  end
  redis.call('ZREM', k, m)
end
local keep = tonumber(ARGV[3])
if keep > 0 then
  local now = tonumber(ARGV[2])
  if not now then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  redis.call('ZADD', KEYS[1], -(now + keep), '~' .. ARGV[1])
  local ms = math.ceil(keep / 1000) + 1
  if redis.call('PTTL', KEYS[1]) < ms then
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end
return 0
`

// slotRenewLua sets the expiry of the slots ARGV[3..] of KEYS[1] that
// still exist to ARGV[1] (as in slotAcquireLua) + ARGV[2]: an expired
// slot is not brought back, since its key may be full again.
const slotRenewLua = `
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], -now, now)
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1)
end
return 0
`

var (
	slotAcquireScript = redis.NewScript(slotAcquireLua)
	slotReleaseScript = redis.NewScript(slotReleaseLua)
)

// SlotKey returns the Redis key of the in-flight count of key with tag
// (see Request.Tag): the counter's key (redisKey) with "gwc" for "gw",
// so that it shares the counter's Redis Cluster slot and never its name.
func SlotKey(tag, key string) string {
	q := limit.Request{Key: key, Tag: tag}
	return "gwc" + redisKey(redisTag(&q), key)[len("gw"):]
}

// nowArg returns the script's first argument: "" (Redis's TIME) or the
// test clock's instant.
func (s *Slots) nowArg() string {
	if s.r.fixedNow != nil {
		return strconv.FormatInt(s.r.fixedNow(), 10)
	}
	return ""
}

// Acquire implements Slots. It returns ErrCircuitOpen while the breaker
// of the keys' node is open.
func (s *Slots) Acquire(ctx context.Context, reqs []limit.SlotRequest) (limit.Permit, int, error) {
	n := len(reqs)
	if n == 0 || n > limit.MaxSlotKeys {
		return nil, -1, fmt.Errorf("limit: %d slot requests, want 1 to %d", n, limit.MaxSlotKeys)
	}
	l := &slotPermit{s: s, n: n, member: s.prefix + strconv.FormatUint(s.seq.Add(1), 36)}
	args := make([]any, 3, 3+n)
	args[0], args[1], args[2] = s.nowArg(), s.ttl, l.member
	var tag0 string
	for i := range reqs {
		q := &reqs[i]
		if q.Limit < 1 {
			return nil, -1, fmt.Errorf("limit: slot of %q has limit %d, want at least 1", q.Key, q.Limit)
		}
		tag := redisTag(&limit.Request{Key: q.Key, Tag: q.Tag})
		if i == 0 {
			tag0 = tag
		} else if tag != tag0 {
			return nil, -1, fmt.Errorf("limit: slot keys %q and %q of one call have different tags", reqs[0].Key, q.Key)
		}
		l.keys[i] = SlotKey(tag, q.Key)
		args = append(args, q.Limit)
	}
	cctx, cancel := context.WithTimeout(ctx, s.r.wait.call)
	defer cancel()
	b, err := s.r.breakerFor(cctx, l.keys[0])
	if err != nil {
		return nil, -1, err
	}
	ok, probe := b.allow()
	if !ok {
		return nil, -1, limit.ErrCircuitOpen
	}
	s.r.stats.calls.Add(1)
	v, err := slotAcquireScript.Run(cctx, s.r.short, l.keys[:n], args...).Int64()
	// As runOnce does: a call whose connection Redis closed (CLIENT KILL,
	// a restart, a connection of the pool closed under it) goes again on
	// another, with the same slot ID, which Redis takes once. Its release
	// then leaves word of it (unsure), in case a send before it runs
	// after it.
	for try := 1; err != nil && isClosedConn(err) && try < closedConnTries && cctx.Err() == nil; try++ {
		l.unsure = true
		s.r.stats.calls.Add(1)
		v, err = slotAcquireScript.Run(cctx, s.r.short, l.keys[:n], args...).Int64()
		err = resent(err)
	}
	if err != nil {
		// Unless Redis answered it (an error reply: a slot that moved,
		// a script it lacks) or it was never sent, the script may have
		// run, or may yet run (a Redis that stalled runs it when it
		// wakes): release what it took, and see that it takes nothing
		// if it has yet to run. (An error reply says the script did not
		// run only because go-redis sends it once: New disables its
		// retries and redirects.) A call sent again may have run at its
		// first send, whatever the last send's error says.
		if l.unsure || !isScriptError(err) && !errors.Is(err, redis.ErrPoolTimeout) && !notSent(err) {
			l.unsure = true
			l.releaseUnheld()
		}
		switch {
		case ctx.Err() != nil:
			b.abandon(probe)
			err = ctx.Err()
		case errors.Is(err, redis.ErrPoolTimeout), isSlotRefusal(err):
			b.abandon(probe)
		default:
			b.failure(probe)
		}
		return nil, -1, fmt.Errorf("redis: %w", err)
	}
	b.success()
	l.until.Store(time.Now().Add(time.Duration(s.ttl) * time.Microsecond).UnixNano())
	if v < 0 {
		return nil, -1, errors.New("redis: the slot was released before it was taken")
	}
	if v != 0 {
		if l.unsure {
			// Refused when sent again: a send before it may yet run and
			// take the slot, with no permit to release it.
			l.releaseUnheld()
		}
		return nil, int(v) - 1, nil
	}
	s.mu.Lock()
	s.live[l] = struct{}{}
	s.mu.Unlock()
	return l, -1, nil
}

// releaseUnheld releases, in the background and leaving word of it, the
// slots of a call that returns no permit but may have taken them, or may
// yet take them when a send of it runs late.
func (l *slotPermit) releaseUnheld() {
	l.released.Store(true)
	l.s.releasing.Add(1)
	go func() {
		defer l.s.releasing.Add(-1)
		l.release()
	}()
}

// slotPermit is the slots of one Acquire, of its n keys.
type slotPermit struct {
	s        *Slots
	keys     [limit.MaxSlotKeys]string
	n        int
	member   string
	released atomic.Bool
	// unsure is set when the call that took the slots was not answered:
	// it may run after its release, which then leaves word of it.
	unsure bool
	// until is when (Unix ns, this process's clock) the slots expire in
	// Redis at the latest, renewed or not: a release that failed is
	// tried again until then.
	until atomic.Int64
}

// Release removes the slots from Redis, on a context of its own: the
// request's may be canceled (the client went away). A release Redis did
// not answer is tried again (retry).
func (l *slotPermit) Release() {
	if l.released.Swap(true) {
		return
	}
	s := l.s
	s.mu.Lock()
	delete(s.live, l)
	s.mu.Unlock()
	l.release()
}

// release sends the release once, and, when Redis does not answer it
// (a stall, a refused connection, an open breaker, a slot that moved to
// another node), tries again in the background.
func (l *slotPermit) release() {
	if !l.releaseOnce() {
		l.s.releasing.Add(1)
		go func() {
			defer l.s.releasing.Add(-1)
			l.retry()
		}()
	}
}

// releaseOnce sends the release and reports whether Redis ran it. It
// leaves word of it for a TTL when the call that took the slot was not
// answered (slotReleaseLua).
func (l *slotPermit) releaseOnce() bool {
	s := l.s
	ctx, cancel := context.WithTimeout(context.Background(), s.r.wait.call)
	defer cancel()
	b, err := s.r.breakerFor(ctx, l.keys[0])
	if err != nil {
		return false
	}
	ok, probe := b.allow()
	if !ok {
		return false
	}
	s.r.stats.calls.Add(1)
	var keep int64
	if l.unsure {
		keep = s.ttl
	}
	if err := slotReleaseScript.Run(ctx, s.r.short, l.keys[:l.n], l.member, s.nowArg(), keep).Err(); err != nil {
		if errors.Is(err, redis.ErrPoolTimeout) || isSlotRefusal(err) {
			b.abandon(probe)
		} else {
			b.failure(probe)
		}
		return false
	}
	b.success()
	return true
}

// retry sends a release Redis did not answer again, waiting about 50ms,
// then twice as long each time up to Renew, until Redis runs it, Close, or —
// for slots whose call was answered — they have expired in Redis anyway.
// A slot whose call was not answered may be taken whenever Redis runs
// that call, so its release is sent until Redis runs it: else a stall of
// half a second could leave a slot held, with nothing in flight, for a
// whole TTL.
func (l *slotPermit) retry() {
	wait := 50 * time.Millisecond
	for {
		// Releases that failed together go again spread over half
		// the wait.
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-l.s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if !l.unsure && time.Now().UnixNano() >= l.until.Load() {
			return
		}
		if l.releaseOnce() {
			return
		}
		wait = min(2*wait, l.s.renew)
	}
}

// run renews the live slots every Renew until Close.
func (s *Slots) run() {
	defer close(s.done)
	t := time.NewTicker(s.renew)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.RenewNow(context.Background()); err != nil && s.onErr != nil {
				s.onErr(err)
			}
		}
	}
}

// RenewNow renews every slot held now for another TTL: one command per
// key, pipelined (a Cluster's pipeline sends each node its keys' commands
// at once). The renewing goroutine calls it every Renew; tests call it to
// renew at an instant of their choosing.
func (s *Slots) RenewNow(ctx context.Context) error {
	byKey := map[string][]any{}
	// A renewal may run as late as the call's bound: the slots may live
	// a TTL from then.
	until := time.Now().Add(s.r.wait.call + time.Duration(s.ttl)*time.Microsecond).UnixNano()
	s.mu.Lock()
	for l := range s.live {
		l.until.Store(max(l.until.Load(), until))
		for i, k := range l.keys[:l.n] {
			m := l.member
			for j := range i {
				if l.keys[j] == k {
					m += "#" + strconv.Itoa(i+1)
				}
			}
			if byKey[k] == nil {
				byKey[k] = []any{"", s.ttl}
			}
			byKey[k] = append(byKey[k], m)
		}
	}
	s.mu.Unlock()
	if len(byKey) == 0 {
		return nil
	}
	now := s.nowArg()
	ctx, cancel := context.WithTimeout(ctx, s.r.wait.call)
	defer cancel()
	_, err := s.r.short.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, args := range byKey {
			args[0] = now
			p.Eval(ctx, slotRenewLua, []string{k}, args...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis slot renewal: %w", err)
	}
	return nil
}

// SlotCount returns the slots of key (with tag, see SlotKey) that Redis
// holds and have not expired at now (Redis's clock, or the test clock).
// For tests and diagnostics.
func (s *Slots) SlotCount(ctx context.Context, tag, key string) (int64, error) {
	k := SlotKey(tag, key)
	min := "-inf"
	if s.r.fixedNow != nil {
		min = "(" + strconv.FormatInt(s.r.fixedNow(), 10)
	} else {
		t, err := s.r.short.Time(ctx).Result()
		if err != nil {
			return 0, err
		}
		min = "(" + strconv.FormatInt(t.UnixMicro(), 10)
	}
	return s.r.short.ZCount(ctx, k, min, "+inf").Result()
}
