package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/redis/go-redis/v9"
)

// This file is the leases (docs/fleet.md, "Leases"), a layer under the
// call: tokens counted in Redis ahead of requests, which the gateway
// admits from without a call. In order: the leases and their state; a
// call's way through them (withLeases: take from the leases, else ask
// Redis for what they lack, then keep what it granted); and beside the
// calls, the next lease asked for in the background (refill) and tokens
// given back to Redis unspent.

// DefaultLeases is the most keys a Redis store holds leases for
// (Config.Leases).
const DefaultLeases = 1 << 16

// maxLeasedLimits is how many limits of one request the lease path holds
// without allocating.
const maxLeasedLimits = 8

// leaseHorizon is the shortest interval over which a lease measures the
// rate of its key's requests.
const leaseHorizon = 20 * time.Millisecond

// leaseAhead is how far ahead a lease covers its key's rate: the script
// leases what the rate uses in it (lease, redis_acts.lua), so a rate of
// at most one request per leaseAhead leases no token beyond the
// request's own (and scriptArgs, ask.go, asks for none).
const leaseAhead = 15 * time.Millisecond

// LeaseIdle is how long a lease's tokens may go unused before the
// gateway gives them back to Redis, and LeaseWait the longest a request
// that Redis denied waits for tokens that other gateways may give back
// (docs/fleet.md, "Leases").
const (
	LeaseIdle = 20 * time.Millisecond
	LeaseWait = 50 * time.Millisecond
)

// maxLeaseWaits is how many other requests' calls for a key's lease a
// request waits for before it calls Redis itself.
const maxLeaseWaits = 4

// minLeaseIdle is the shortest time a lease waits unused before its
// tokens go back.
const minLeaseIdle = 2 * time.Millisecond

// tokenLeases are a Redis store's leases of tokens (docs/fleet.md, "Leases"; not
// the concurrency slots' Lease): for a limit of a window algorithm
// (fixed_window, sliding_window), the script counts
// more than the request into the bucket or window it counts in, and the
// gateway admits that many more requests locally, without a call, until
// they are spent or that bucket ends. Every admission falls in the bucket
// it was counted in, so each limit holds for the fleet exactly as it does
// in one memory store. Tokens the gateway stops using go back to Redis:
// after LeaseIdle without a request, LeaseIdle after their grant, when
// the limit is reloaded, when a sliding window's bucket ends, and when
// the store closes.
//
// The script sizes a lease from the rate at which this gateway sees the
// key's requests (so that it lasts about until the bucket ends), less
// what the gateway still holds, at most the room left divided by twice
// the fleet's size, and at least the request itself; the gateway asks for
// none once Redis reported less than half the limit left (contested):
// near the limit, every request is a call.
//
// A request is admitted from leases only if every limit of it has one
// with a token; it then takes one from each. It is safe for concurrent
// use.
type tokenLeases struct {
	max int
	mu  sync.Mutex
	m   map[string]*tokenLease
	// granted counts the tokens leased beyond the requests that asked,
	// spent those admitted from leases, expired those lost when their
	// bucket ended, returned those given back to Redis.
	granted, spent, expired, returned atomic.Int64
	// late counts the tokens leased to calls answered after their
	// callers stopped waiting, which go back at once (lateCall).
	late atomic.Int64
	// idle is LeaseIdle, or a test's.
	idle time.Duration
	// now is the store's clock, in ns since its epoch.
	now func() int64
	// giveBack gives tokens back to Redis; nil drops them (tests).
	giveBack func([]leaseReturn)
	// bg tracks the goroutines that give tokens back or ask for the next
	// lease, so that Close can wait for them.
	bg sync.WaitGroup
	// closed is set by close: no lease is granted after it.
	closed bool
	// once holds the keys seen once, which have no lease yet.
	once leaseOnce
}

// tokenLease is one key's lease: tokens counted in Redis in bucket, which
// ends at end, for limits with params.
type tokenLease struct {
	key    string
	mu     sync.Mutex
	params limit.Params
	tokens int64
	end    int64 // ns since the store's epoch; no token is used from then
	bucket int64 // the script's number of the bucket (redis.lua)
	// remaining and reset are Redis's answer when the lease was granted:
	// the room left beside the tokens, and the time to the limit's full
	// replenishment from granted.
	remaining int64
	reset     time.Duration
	granted   int64 // when, ns since the epoch
	// last is the number of tokens last granted; pending is set while a
	// request is asking Redis for the next lease.
	last    int64
	pending bool
	ready   chan struct{} // closed when the pending request's answer is in
	// seen counts the key's requests since since (ns since the epoch):
	// the rate of the next lease.
	seen  int64
	since int64
	rate  float64 // requests per second, as last measured
	// room is the room Redis last reported for the key beside the
	// tokens held (Result.Remaining), -1 before any answer.
	room int64
	// used is when a request last asked for the lease; timer gives the
	// tokens back once it is idle, checking at checkAt.
	used    int64
	timer   *time.Timer
	checkAt int64
	// group are the leases of the request that last asked for this
	// one's next tokens, itself included (nil for a request of one
	// limit): they go back together (idleCheck).
	group []*tokenLease
	// back counts the tokens on their way back to Redis (drop), whose
	// return Redis has not answered yet; backDone is closed when it
	// has (nil when none are).
	back     int64
	backDone chan struct{}
}

func newTokenLeases(max int, now func() int64) *tokenLeases {
	return &tokenLeases{max: max, m: make(map[string]*tokenLease), idle: LeaseIdle, now: now}
}

// leasable reports whether reqs may be decided with leases: every limit
// is a counted window limit of one unit (not deferred, not a charge, not
// one that may wait: its room may be ahead, in Redis's queue), not
// a dry run and without a lockout (a lease never denies, so it could not
// start one).
func leasable(reqs []limit.Request) bool {
	for i := range reqs {
		p := reqs[i].Params
		if reqs[i].Shadow || p.Lock > 0 || p.Limit <= 0 || reqs[i].Units() != 1 || reqs[i].Act != limit.Take || reqs[i].Wait > 0 ||
			(p.Algorithm != "fixed_window" && p.Algorithm != "sliding_window") {
			return false
		}
	}
	return true
}

// A call's way through its leases, in the order it meets them:
// withLeases takes from the leases (fromLeases, takeWaiting, take), or
// spends what some have (spendSome) and asks (ask.go) for the rest and
// for the leases' next tokens; then keeps what Redis granted (granted)
// and ends (finish).

// withLeases decides the call from the leases of its limits when each
// has a token; else it spends the tokens some have, asks (ask, ask.go)
// for the rest and for the leases' next tokens, keeps the tokens Redis
// granted (granted), remembers a denial (remember, allow.go), and puts
// the tokens it spent back when the request is not admitted (finish). Leases go first:
// their tokens are counted already, and a denial another request met
// meanwhile must not leave them unspent. They need the gateway's clock to
// run with Redis's: not on a test's fixed decision clock (allow checks).
func (c *call) withLeases(ctx context.Context) (d scriptAnswer, err error) {
	r := c.r
	var ok bool
	ok, c.lease, err = r.fromLeases(ctx, c.now, c.keys, c.reqs, c.res, c.tag, &c.start)
	if err != nil || ok {
		// The claim, if any, is the background refill's.
		tracing.Source(ctx, "lease")
		return scriptAnswer{allowed: ok}, err
	}
	c.claimAsked = c.lease.claim != nil
	defer func() { c.finish(d.allowed) }()
	if c.spendSome() {
		tracing.Source(ctx, "lease")
		return scriptAnswer{allowed: true}, nil
	}
	if d, err = c.ask(ctx); err != nil {
		// When its answer comes after all, the tokens Redis leased it
		// go back.
		r.leasedLate(err, c.keys, c.reqs, 1)
		return d, err
	}
	if d.decided {
		c.granted(d)
	}
	c.remember(d) // before finish wakes the requests waiting for this answer
	return d, nil
}

// fromLeases decides reqs from the leases of keys if it can, and reports
// whether it admitted them. Otherwise it returns what the call to Redis
// should ask for, having waited, if other requests were asking for the
// same leases, for their answers (takeWaiting; start is then the new
// start). A request admitted from the last quarter of a lease asks for
// the next one in the background.
func (r *Store) fromLeases(ctx context.Context, now time.Time, keys []string, reqs []limit.Request, res []limit.Result, tag string, start *int64) (bool, *leaseAsk, error) {
	n := len(reqs)
	ask := newLeaseAsk(n)
	ok, claim, err := r.leases.takeWaiting(ctx, keys, reqs, res, start, ask.rates, ask.have)
	if err != nil {
		return false, nil, err
	}
	ask.claim = claim
	if ok {
		r.stats.decisions.Add(1)
		if claim != nil {
			keys, reqs := slices.Clone(keys), slices.Clone(reqs)
			if !r.leases.background(func() { r.refill(now, keys, reqs, tag, ask) }) {
				r.leases.release(claim) // closed: no next lease
			}
		}
	}
	return ok, ask, nil
}

// leaseAsk is what a call asks of the leases of its limits: rates[i] and
// have[i] are the rate limit i's lease should cover and the tokens the
// gateway still holds of it (all rates 0: no lease); claim, when not nil,
// holds the leases this call asks for.
type leaseAsk struct {
	rates, have []int64
	claim       *leaseClaim
	// refill marks a call that only asks for the next lease.
	refill bool
	// buf holds rates and have of a call of few limits.
	buf [4]int64
}

// newLeaseAsk returns a leaseAsk for a call of n limits that asks for
// nothing yet: in one allocation, for a call of up to two.
func newLeaseAsk(n int) *leaseAsk {
	ask := &leaseAsk{}
	if 2*n <= len(ask.buf) {
		ask.rates, ask.have = ask.buf[:n:n], ask.buf[n:2*n:2*n]
	} else {
		ask.rates, ask.have = make([]int64, n), make([]int64, n)
	}
	return ask
}

// takeWaiting is take for a request that, when another request is asking
// Redis for the lease it needs, waits for that one's answer and takes
// again (start, ns since the epoch, is then the time it took again). A
// request that wakes to find the lease spent already and the next one
// asked for meanwhile waits for that one too, rather than call Redis for
// itself: a busy key's requests then cost one call per lease, not one
// per request woken too late for the tokens. It waits so up to
// maxLeaseWaits times, and not once a lease of its keys is contested
// (near the limit, every request is a call). A retake is not counted
// again in its keys' rates.
func (ls *tokenLeases) takeWaiting(ctx context.Context, keys []string, reqs []limit.Request, res []limit.Result, start *int64, rates, have []int64) (bool, *leaseClaim, error) {
	ok, claim, wait := ls.take(keys, reqs, res, *start, rates, have)
	for waits := 1; wait != nil; waits++ {
		// Its answer comes no later than this request's own would.
		select {
		case <-wait:
		case <-ctx.Done():
			return false, nil, fmt.Errorf("redis: %w", ctx.Err())
		}
		*start = ls.now()
		ok, claim, wait = ls.takeOnce(keys, reqs, res, *start, rates, have, false)
		if wait != nil && (waits >= maxLeaseWaits || !ls.grantable(keys, reqs)) {
			wait = nil
		}
	}
	if !ok {
		// The request goes to Redis. Tokens of its keys on their way back
		// get there first: Redis's answer then counts them as room, as
		// the gateway no longer holds them (Result.Remaining is the room
		// Redis has beside the tokens the gateway holds).
		for back := ls.returning(keys); back != nil; back = ls.returning(keys) {
			select {
			case <-back:
				*start = ls.now()
			case <-ctx.Done():
				if claim != nil {
					ls.release(claim)
				}
				return false, nil, fmt.Errorf("redis: %w", ctx.Err())
			}
		}
	}
	return ok, claim, nil
}

// take admits a request from the leases of keys, writing each limit's
// Result into res, if every limit has a token left in its bucket at now
// (ns since the epoch); it takes one from each. Otherwise it takes none,
// and the request goes to Redis: with a lease, when no other request's
// lease is on its way for these keys (claim holds the leases it asks
// for, which the caller releases after the call), rates and have then
// holding the rate each limit's lease should cover and the tokens the
// gateway holds for it; else as one request (rates 0).
//
// A lease is asked for before it runs out: the request that finds a
// lease down to a quarter of what it was granted spends a token and
// claims the leases (ok and claim not nil): the caller asks for the next
// lease alongside, while the others go on spending what is left, so that
// a busy key is rarely without tokens and a held token is never left
// unspent for want of Redis's room. One request at a time asks for a
// key's lease: the requests that find it empty meanwhile wait for that
// request's answer (wait, closed when it is in) and take again, rather
// than call Redis for themselves (takeWaiting).
func (ls *tokenLeases) take(keys []string, reqs []limit.Request, res []limit.Result, now int64, rates, have []int64) (ok bool, claim *leaseClaim, wait <-chan struct{}) {
	return ls.takeOnce(keys, reqs, res, now, rates, have, true)
}

// takeOnce is take; count counts the request in its keys' rates (not
// when it took before, see takeWaiting).
func (ls *tokenLeases) takeOnce(keys []string, reqs []limit.Request, res []limit.Result, now int64, rates, have []int64, count bool) (ok bool, claim *leaseClaim, wait <-chan struct{}) {
	var buf [maxLeasedLimits]*tokenLease
	held := buf[:0]
	if len(keys) > len(buf) {
		held = make([]*tokenLease, 0, len(keys))
	}
	held = held[:len(keys)]
	ls.mu.Lock()
	for i, k := range keys {
		held[i] = ls.m[k]
	}
	ls.mu.Unlock()
	var empty, low, pending, missing bool
	var back []leaseReturn
	for i, k := range keys {
		l := held[i]
		if l == nil {
			if ls.once.first(k) {
				// A key's first request: one request, as without.
				missing = true
				continue
			}
			if l = ls.get(k, now); l == nil {
				missing = true
				continue
			}
			held[i] = l
		}
		l.mu.Lock()
		if count {
			l.seen++
		}
		l.used = now
		if l.tokens > 0 && (now >= l.end || l.params != *reqs[i].Params) {
			// The bucket ended, or a reload changed the limit.
			back = ls.drop(l, now, back)
		}
		switch {
		case l.tokens == 0:
			empty = true
		case 4*l.tokens <= l.last && !contested(l.room, reqs[i].Params.Limit):
			// Low: ask for the next lease while spending what is left
			// (not near the limit, where the next request is a call).
			low = true
		}
		pending = pending || l.pending
		l.mu.Unlock()
	}
	ls.async(back)
	if missing {
		// No room for a lease of some key, or its first request: one
		// request, as without.
		clear(rates)
		return false, nil, nil
	}
	if !empty && (!low || pending) && ls.spend(held, res, now) {
		return true, nil, nil
	}
	// Claim every lease, each in one step, or none: a lease another
	// request claimed meanwhile makes this one give back its own and
	// wait for that one's answer.
	ready := make(chan struct{})
	for i, l := range held {
		l.mu.Lock()
		if l.pending {
			wait = l.ready
			l.mu.Unlock()
			for _, g := range held[:i] {
				g.mu.Lock()
				g.pending, g.ready = false, nil
				g.mu.Unlock()
			}
			close(ready)
			break
		}
		l.pending, l.ready = true, ready
		l.mu.Unlock()
	}
	if wait == nil {
		claim = &leaseClaim{leases: slices.Clone(held), ready: ready}
	}
	for i, l := range held {
		l.mu.Lock()
		if claim != nil && len(held) > 1 {
			l.group = claim.leases
		}
		// The rate since since, once there is something to measure;
		// since moves on every leaseHorizon.
		if d := now - l.since; d >= int64(leaseHorizon) || (l.seen > 1 && d >= int64(time.Millisecond)) {
			l.rate = float64(l.seen) * float64(time.Second) / float64(d)
			if d >= int64(leaseHorizon) {
				l.seen, l.since = 0, now
			}
		}
		rates[i], have[i] = 0, 0
		if claim != nil && !contested(l.room, reqs[i].Params.Limit) {
			rates[i], have[i] = int64(l.rate+0.5), l.tokens
		}
		l.mu.Unlock()
	}
	if claim != nil && !empty && ls.spend(held, res, now) {
		// Admitted from what is left; the caller asks for the next lease.
		for i := range have {
			have[i] = max(have[i]-1, 0)
		}
		return true, claim, nil
	}
	return false, claim, wait
}

// leaseOnceSlots is the size of tokenLeases' table of keys seen once.
const leaseOnceSlots = 1 << 14

// leaseOnceSeed hashes keys for the table of keys seen once.
var leaseOnceSeed = maphash.MakeSeed()

// leaseOnce remembers keys that this gateway has seen once, so that a key
// gets a lease only from its second request on: a lease is sized by the
// key's rate, which its first request cannot tell (the script leases it
// nothing), and a flood of keys that are each asked for once (callers that
// come once) then costs no lease's bookkeeping. It is a table of the
// keys' hashes in which each key may sit in one of two neighbouring
// slots: a key pushed out by two others meanwhile counts as not seen,
// which only puts off its lease by a request. (With one slot per key, two
// keys of one request that shared a slot pushed each other out on every
// request, and that request never had a lease.) It is safe for
// concurrent use; the zero value is empty.
type leaseOnce struct {
	slots [leaseOnceSlots]atomic.Uint64
}

// first reports whether key was not seen since two others took its slots,
// and remembers it: in its first slot, the key there moving to the second.
func (o *leaseOnce) first(key string) bool {
	h := maphash.String(leaseOnceSeed, key) | 1 // 0 is an empty slot
	i := h % leaseOnceSlots
	a, b := &o.slots[i], &o.slots[i^1]
	if old := a.Load(); old != h {
		if b.Load() == h {
			return false
		}
		b.Store(old)
		a.Store(h)
		return true
	}
	return false
}

// get returns the lease of key, creating it when there is room.
func (ls *tokenLeases) get(key string, now int64) *tokenLease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.m[key]; ok {
		return l
	}
	if len(ls.m) >= ls.max {
		ls.sweep(now)
		if len(ls.m) >= ls.max {
			return nil
		}
	}
	l := &tokenLease{key: key, since: now, room: -1}
	ls.m[key] = l
	return l
}

// sweep drops the leases that have no tokens left to use and no request
// waiting for one. ls.mu is held.
func (ls *tokenLeases) sweep(now int64) {
	var back []leaseReturn
	for k, l := range ls.m {
		l.mu.Lock()
		if !l.pending && (now >= l.end || l.tokens == 0) {
			back = ls.drop(l, now, back)
			delete(ls.m, k)
		}
		l.mu.Unlock()
	}
	ls.async(back)
}

// drop takes l's tokens away, appending them to back when they can go
// back to Redis: a bucket that has not ended, or a sliding window's that
// may still be in its window (the script checks). l.mu is held.
func (ls *tokenLeases) drop(l *tokenLease, now int64, back []leaseReturn) []leaseReturn {
	if l.tokens == 0 {
		return back
	}
	if ls.giveBack != nil && (now < l.end || l.params.Algorithm == "sliding_window") {
		back = append(back, leaseReturn{key: l.key, params: l.params, bucket: l.bucket, n: l.tokens, lease: l})
		l.back += l.tokens
		if l.backDone == nil {
			l.backDone = make(chan struct{})
		}
	} else {
		ls.expired.Add(l.tokens)
	}
	l.tokens = 0
	return back
}

// spend takes a token from each of held, writing each limit's Result
// into res, and reports whether it could; when one has none left (taken
// meanwhile), it gives back what it took.
func (ls *tokenLeases) spend(held []*tokenLease, res []limit.Result, now int64) bool {
	for i, l := range held {
		l.mu.Lock()
		if l.tokens == 0 || now >= l.end {
			l.mu.Unlock()
			for _, g := range held[:i] {
				g.mu.Lock()
				if now < g.end {
					g.tokens++
				}
				g.mu.Unlock()
			}
			return false
		}
		l.tokens--
		res[i] = limit.Result{
			Allowed:   true,
			Limit:     l.params.Limit,
			Remaining: l.remaining + l.tokens,
			Reset:     max(l.reset-time.Duration(now-l.granted), 0),
		}
		l.mu.Unlock()
	}
	ls.spent.Add(1)
	return true
}

// leaseClaim is a request's claim on the leases of its keys: it is the
// one asking Redis for their next tokens; ready is closed when it has
// its answer.
type leaseClaim struct {
	leases []*tokenLease
	ready  chan struct{}
}

// grantable reports whether every lease of keys may be granted tokens:
// each exists and none is contested.
func (ls *tokenLeases) grantable(keys []string, reqs []limit.Request) bool {
	for i, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil {
			return false
		}
		l.mu.Lock()
		c := contested(l.room, reqs[i].Params.Limit)
		l.mu.Unlock()
		if c {
			return false
		}
	}
	return true
}

// spendSome spends a token of every limit whose lease has one, and
// narrows the call to the others, which go to Redis: a token held for one
// limit of a request is never left unspent because another's lease is
// empty. It reports whether that decided every limit. When Redis then
// denies the request, finish puts the tokens back.
func (c *call) spendSome() bool {
	if c.lease == nil {
		return false
	}
	taken, rest := c.r.leases.takeSome(c.keys, c.reqs, c.res, c.start)
	if taken == nil {
		return false
	}
	if len(rest) == 0 {
		c.r.stats.decisions.Add(1)
		return true
	}
	c.taken, c.rest, c.spentSome = taken, rest, true
	c.keys, c.reqs, c.res, c.lease = pick(c.keys, rest), pick(c.reqs, rest), make([]limit.Result, len(rest)), c.lease.pick(rest)
	return false
}

// takeSome takes a token from the lease of each of keys that has one
// left in its bucket at now, writing that limit's Result into res. It
// returns the leases it took from, by index (nil where it took none), and
// the indexes of the limits it took none for; taken is nil when it took
// none at all.
func (ls *tokenLeases) takeSome(keys []string, reqs []limit.Request, res []limit.Result, now int64) (taken []*tokenLease, rest []int) {
	for i, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l != nil {
			l.mu.Lock()
			if l.tokens > 0 && now < l.end && l.params == *reqs[i].Params {
				l.tokens--
				res[i] = limit.Result{
					Allowed:   true,
					Limit:     l.params.Limit,
					Remaining: l.remaining + l.tokens,
					Reset:     max(l.reset-time.Duration(now-l.granted), 0),
				}
				l.mu.Unlock()
			} else {
				l.mu.Unlock()
				l = nil
			}
		}
		if l == nil {
			rest = append(rest, i)
			continue
		}
		if taken == nil {
			taken = make([]*tokenLease, len(keys))
		}
		taken[i] = l
	}
	if taken != nil && len(rest) == 0 {
		ls.spent.Add(1)
	}
	return taken, rest
}

// pick returns the elements of s at idx.
func pick[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

// pick returns what ask asks for the limits at idx.
func (ask *leaseAsk) pick(idx []int) *leaseAsk {
	return &leaseAsk{rates: pick(ask.rates, idx), have: pick(ask.have, idx), claim: ask.claim}
}

// granted records the leases Redis granted the call, and the tokens the
// gateway holds in each Result's Remaining; nothing for a call that
// asked for no lease.
func (c *call) granted(d scriptAnswer) {
	if c.lease == nil {
		return
	}
	if d.allowed && c.lease.claim != nil {
		c.r.leases.grant(c.keys, c.reqs, c.res, d.grants, c.start, 1)
	}
	c.r.leases.unspent(c.keys, c.reqs, c.res, c.start)
}

// leaseGrant is what the script leased for one limit: n tokens counted in
// bucket, which ends span after the call's start.
type leaseGrant struct {
	n      int64
	span   time.Duration
	bucket int64
}

// grant records the tokens the script leased for keys: g[i].n, of which
// own (1, or 0 for a call that only asked for the next lease) went to the
// request that asked. start is the call's start (ns since the epoch,
// taken before the call: the bucket ends no sooner in this gateway's
// time). Tokens of the bucket the lease already holds are added to it;
// those of another bucket replace it.
func (ls *tokenLeases) grant(keys []string, reqs []limit.Request, res []limit.Result, g []leaseGrant, start, own int64) {
	var back []leaseReturn
	for i, k := range keys {
		n := g[i].n - own
		if n <= 0 {
			continue
		}
		ls.mu.Lock()
		l := ls.m[k]
		closed := ls.closed
		ls.mu.Unlock()
		if l == nil || closed {
			if closed && ls.giveBack != nil {
				back = append(back, leaseReturn{key: k, params: *reqs[i].Params, bucket: g[i].bucket, n: n})
			}
			continue
		}
		l.mu.Lock()
		end := start + int64(g[i].span)
		if l.tokens > 0 && start < l.end && l.params == *reqs[i].Params && l.bucket == g[i].bucket {
			// Tokens of the same bucket (another request's lease came
			// first): keep both. Each end is no later than the bucket's
			// true one: the later is the closer.
			l.tokens += n
			l.end = max(l.end, end)
		} else {
			back = ls.drop(l, start, back)
			l.params, l.tokens, l.end, l.bucket = *reqs[i].Params, n, end, g[i].bucket
		}
		l.last = l.tokens
		l.remaining, l.reset, l.granted, l.room = res[i].Remaining, res[i].Reset, start, res[i].Remaining
		if ls.giveBack != nil {
			d := l.idleAfter(ls.idle)
			l.checkAt = ls.now() + int64(d)
			if l.timer == nil {
				l.timer = time.AfterFunc(d, func() { ls.idleCheck(l) })
			} else {
				l.timer.Reset(d)
			}
		}
		l.mu.Unlock()
		ls.granted.Add(n)
	}
	ls.async(back)
}

// unspent adds to each Result of a call the tokens this gateway holds for
// its limit: Redis counted them, but they are room the gateway has yet
// to admit from, as a memory store's Remaining would show.
func (ls *tokenLeases) unspent(keys []string, reqs []limit.Request, res []limit.Result, now int64) {
	for i, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil || res[i].Remaining < 0 {
			continue
		}
		l.mu.Lock()
		l.room = res[i].Remaining
		if now < l.end && l.params == *reqs[i].Params {
			res[i].Remaining += l.tokens
		}
		l.mu.Unlock()
	}
}

// contested reports whether a limit whose room Redis last reported as
// room (-1: not known) is too close to full for a lease: the last half of
// a bucket's room goes call by call. Tokens leased near the end are the
// ones left unspent in one gateway while another's request is denied,
// which must then wait for them to come back; early tokens are spent, or
// come back, while the fleet uses that half.
func contested(room, lim int64) bool {
	return room >= 0 && 2*room < lim
}

// finish ends the call: the Results of a narrowed call go back to their
// places, the tokens spendSome took go back to their leases when the
// request was not admitted, and the claim on the leases is released.
func (c *call) finish(allowed bool) {
	if c.spentSome {
		for j, i := range c.rest {
			c.full[i] = c.res[j]
		}
		if !allowed {
			c.r.leases.putBack(c.taken, c.fullReqs, c.full, c.start)
		}
	}
	if c.claimAsked {
		c.r.leases.release(c.lease.claim)
	}
}

// putBack gives the tokens takeSome took back to their leases, for a
// request that was not admitted, and writes their limits' Results as
// Redis's for a limit that admits a request another denies: the room as
// it stands.
func (ls *tokenLeases) putBack(taken []*tokenLease, reqs []limit.Request, res []limit.Result, now int64) {
	for i, l := range taken {
		if l == nil {
			continue
		}
		l.mu.Lock()
		if now < l.end && l.params == *reqs[i].Params {
			l.tokens++
		}
		res[i] = limit.Result{Allowed: true, Limit: l.params.Limit, Remaining: l.remaining + l.tokens,
			Reset: max(l.reset-time.Duration(now-l.granted), 0)}
		l.mu.Unlock()
	}
}

// release ends the claim of a request that asked for leases: their next
// may be asked for again, and the requests waiting for this one's answer
// take again.
func (ls *tokenLeases) release(c *leaseClaim) {
	for _, l := range c.leases {
		l.mu.Lock()
		l.pending, l.ready = false, nil
		l.mu.Unlock()
	}
	close(c.ready)
}

// Beside the calls: the next lease asked for in the background, and the
// goroutines Close waits for.

// refill asks Redis for the next leases of reqs, whose claim ask holds:
// a call that counts no request, only tokens.
func (r *Store) refill(now time.Time, keys []string, reqs []limit.Request, tag string, ask *leaseAsk) {
	defer r.leases.release(ask.claim)
	for i := range ask.rates {
		ask.rates[i] = max(ask.rates[i], 1) // every token counted is leased
	}
	ask.refill = true
	args := r.scriptArgs(now, reqs, tag, ask)
	start := r.clock()
	ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
	defer cancel()
	res := make([]limit.Result, len(reqs))
	d, err := r.decide(ctx, keys, reqs, args, res)
	switch {
	case err != nil:
		r.leasedLate(err, keys, reqs, 0)
	case d.allowed:
		r.leases.grant(keys, reqs, res, d.grants, start, 0)
	}
}

// background runs f in a goroutine that close waits for, unless the
// leases have closed (then it reports false): an Add of bg must not race
// with close's Wait.
func (ls *tokenLeases) background(f func()) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return false
	}
	ls.bg.Go(f)
	return true
}

// idleOr0 returns ls.idle, or 0 when there are no leases.
func (ls *tokenLeases) idleOr0() time.Duration {
	if ls == nil {
		return 0
	}
	return ls.idle
}

// Tokens given back to Redis unspent: a lease idle (idleCheck), a bucket
// ended or a limit reloaded (drop), the store closing (close), and the
// tokens Redis leased a call whose caller stopped waiting (leasedLate).

// idleAfter returns how long l may go without a request before its
// tokens go back: three of the mean intervals between its key's requests,
// at least minLeaseIdle and at most most. A burst's leftover tokens so go
// back within a few ms, while a steady key's lease is kept between its
// requests. l.mu is held.
func (l *tokenLease) idleAfter(most time.Duration) time.Duration {
	if l.rate <= 0 {
		return most
	}
	return min(max(time.Duration(3*float64(time.Second)/l.rate), min(minLeaseIdle, most)), most)
}

// idleCheck gives l's tokens back to Redis when no request asked for them
// for l.idleAfter(ls.idle), or when they were granted ls.idle ago (their
// life), or checks again when one of those will be so. A check that runs
// minLeaseIdle or more after it was due finds the key idle for as long as
// the process was kept from running, its requests too: it looks again
// l.idleAfter later (their life still bounds the tokens' time out).
//
// The life bounds how long a token stays out even on a busy key: a lease
// covers what the key's rate uses in 15ms, so tokens left after ls.idle
// mean its rate fell, and another gateway's request that Redis denies
// meanwhile waits for them only if a lease was granted within LeaseIdle
// and LeaseWait (scriptAnswer.tokensMayComeBack).
func (ls *tokenLeases) idleCheck(l *tokenLease) {
	l.mu.Lock()
	if l.tokens == 0 {
		l.mu.Unlock()
		return
	}
	now := ls.now()
	idle, life := int64(l.idleAfter(ls.idle)), l.granted+int64(ls.idle)
	if l.pending && l.timer != nil {
		// A request of this gateway is asking Redis for the key's next
		// tokens: Redis's answer counts these as held here (its
		// Remaining is the room beside them), so they stay until it is
		// in, and are looked at again an idle time on.
		l.checkAt = now + idle
		l.timer.Reset(time.Duration(idle))
		l.mu.Unlock()
		return
	}
	due := min(l.used+idle, life)
	if l.timer != nil && (now < due || (now < life && now-l.checkAt >= int64(minLeaseIdle))) {
		if now >= due {
			// The check ran late: this process got no CPU meanwhile (a
			// loaded machine), and the key's requests were held up as
			// long as the timer was. Look again an idle time on, once
			// they have come in, within the life.
			due = min(now+idle, life)
		}
		l.checkAt = due
		l.timer.Reset(time.Duration(due - now))
		l.mu.Unlock()
		return
	}
	back := ls.drop(l, now, nil)
	group, used, granted := l.group, l.used, l.granted
	l.mu.Unlock()
	back = ls.dropGroup(l, group, now < life, used, granted, now, back)
	if len(back) > 0 {
		ls.sendBack(back)
	}
}

// dropGroup takes away the tokens of the leases of group other than l,
// appending them to back as drop does, when they are as unused as l,
// whose tokens go back: idle, when no request asked for them since one
// last asked for l (at used); else, when they were granted no later than
// l (at granted), whose life ended. A request takes a token of each of
// its limits or of none, so a lease whose partner's tokens went back
// would otherwise be spent one request at a time, each calling Redis for
// the partner alone, and refilled out of step with it.
func (ls *tokenLeases) dropGroup(l *tokenLease, group []*tokenLease, idle bool, used, granted, now int64, back []leaseReturn) []leaseReturn {
	for _, g := range group {
		if g == l {
			continue
		}
		g.mu.Lock()
		if !g.pending && ((idle && g.used <= used) || (!idle && g.granted <= granted)) {
			back = ls.drop(g, now, back)
		}
		g.mu.Unlock()
	}
	return back
}

// async gives back in the background.
func (ls *tokenLeases) async(back []leaseReturn) {
	if len(back) == 0 {
		return
	}
	if !ls.background(func() { ls.sendBack(back) }) {
		// The store is closing: sent here, not in a goroutine its Close
		// no longer waits for.
		ls.sendBack(back)
	}
}

// sendBack gives back to Redis, and then tells the leases whose tokens
// went that Redis has answered (backDone).
func (ls *tokenLeases) sendBack(back []leaseReturn) {
	ls.giveBack(back)
	for _, t := range back {
		l := t.lease
		if l == nil {
			continue
		}
		l.mu.Lock()
		if l.back -= t.n; l.back <= 0 && l.backDone != nil {
			l.back = 0
			close(l.backDone)
			l.backDone = nil
		}
		l.mu.Unlock()
	}
}

// returning returns a channel closed once the tokens of keys on their way
// back to Redis have arrived, or nil when none are on their way.
func (ls *tokenLeases) returning(keys []string) <-chan struct{} {
	for _, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil {
			continue
		}
		l.mu.Lock()
		done := l.backDone
		l.mu.Unlock()
		if done != nil {
			return done
		}
	}
	return nil
}

// close stops granting leases and returns every token held, for the
// caller to give back.
func (ls *tokenLeases) close() []leaseReturn {
	ls.mu.Lock()
	ls.closed = true
	all := make([]*tokenLease, 0, len(ls.m))
	for _, l := range ls.m {
		all = append(all, l)
	}
	ls.mu.Unlock()
	now := ls.now()
	var back []leaseReturn
	for _, l := range all {
		l.mu.Lock()
		if l.timer != nil {
			l.timer.Stop()
		}
		back = ls.drop(l, now, back)
		l.mu.Unlock()
	}
	return back
}

// leaseReturnLua gives a lease's unspent tokens back to Redis.
//
//go:embed lease_return.lua
var leaseReturnLua string

var leaseReturnScript = redis.NewScript(leaseReturnLua)

// giveBack gives tokens of leases back to Redis, in one round trip per
// node, within one call's time: each return counts only if the bucket
// its tokens were counted in still counts (lease_return.lua). A return
// that fails loses its tokens to the fleet until their bucket ends, as
// before there were returns; it is never sent twice.
func (r *Store) giveBack(back []leaseReturn) {
	ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
	defer cancel()
	cmds := make([]*redis.Cmd, len(back))
	run := func(p redis.Pipeliner, sha bool) {
		for i := range back {
			t := &back[i]
			args := []any{t.shape(), t.bucket, t.n}
			if sha {
				cmds[i] = p.EvalSha(ctx, leaseReturnScript.Hash(), []string{t.key}, args...)
			} else {
				cmds[i] = p.Eval(ctx, leaseReturnLua, []string{t.key}, args...)
			}
		}
	}
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, true); return nil })
	if cmds[0].Err() != nil && isNoScript(cmds[0].Err()) {
		_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, false); return nil })
	}
	for _, c := range cmds {
		if n, err := c.Int64(); err == nil {
			r.leases.returned.Add(n)
		}
	}
}

// leaseReturn is tokens given back to Redis: n counted in bucket of the
// key under params.
type leaseReturn struct {
	key    string
	params limit.Params
	bucket int64
	n      int64
	// lease is the lease the tokens were taken from, if any: it learns
	// when they are back (tokenLeases.sendBack).
	lease *tokenLease
}

// shape returns the counter's shape as the script names it (the "_id"
// field, redis.lua): a return applies only to a counter of that shape.
func (t *leaseReturn) shape() string {
	p := &t.params
	s := p.Algorithm + "/" + strconv.FormatInt(micros(p.Window), 10) + "/" + strconv.Itoa(p.Precision)
	if p.Calendar != "" {
		zone := p.Zone
		if zone == "" {
			zone = "UTC"
		}
		s += "/" + string(p.Calendar) + "@" + zone
	}
	return s
}

// lateLease is what a late call asked of leases: the tokens of keys
// under params that Redis counts beyond own (1 for a request's call, 0
// for one that only asks for the next lease), when it admits the call.
type lateLease struct {
	keys   []string
	params []limit.Params
	own    int64
	done   bool
}

// leasedLate notes that the call of err, if Redis did not answer it in
// time, asked for leases of keys under reqs' limits, own tokens of which
// were the request's: no one waits for its answer any more, so the
// tokens Redis leases it when it runs go back to Redis (lease_return.lua)
// rather than stay counted, unspent, until their bucket ends.
func (r *Store) leasedLate(err error, keys []string, reqs []limit.Request, own int64) {
	var le *lateError
	if r.leases == nil || !errors.As(err, &le) {
		return
	}
	params := make([]limit.Params, len(reqs))
	for i := range reqs {
		params[i] = *reqs[i].Params
	}
	lc := le.call
	lc.mu.Lock()
	if lc.lease == nil {
		lc.lease = &lateLease{keys: slices.Clone(keys), params: params, own: own}
	}
	lc.mu.Unlock()
	lc.giveBackLeased()
}

// giveBackLeased gives back the tokens Redis leased to the call, once
// its answer is in and the call's leases are known.
func (lc *lateCall) giveBackLeased() {
	lc.mu.Lock()
	l, v := lc.lease, lc.v
	if l == nil || l.done || v == nil {
		lc.mu.Unlock()
		return
	}
	l.done = true
	lc.mu.Unlock()
	ls := lc.r.leases
	if len(v) != 2+resultsPerLimit*len(l.keys) {
		return
	}
	var back []leaseReturn
	for i, k := range l.keys {
		w := v[1+resultsPerLimit*i:]
		n := w[4] - l.own
		if n <= 0 {
			continue
		}
		ls.late.Add(n)
		ls.granted.Add(n)
		if ls.giveBack == nil {
			ls.expired.Add(n)
			continue
		}
		back = append(back, leaseReturn{key: k, params: l.params[i], bucket: w[6], n: n})
	}
	ls.async(back)
}
