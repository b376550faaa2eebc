package redisstore

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

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

// idleOr0 returns ls.idle, or 0 when there are no leases.
func (ls *tokenLeases) idleOr0() time.Duration {
	if ls == nil {
		return 0
	}
	return ls.idle
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

// leaseClaim is a request's claim on the leases of its keys: it is the
// one asking Redis for their next tokens; ready is closed when it has
// its answer.
type leaseClaim struct {
	leases []*tokenLease
	ready  chan struct{}
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

// contested reports whether a limit whose room Redis last reported as
// room (-1: not known) is too close to full for a lease: the last half of
// a bucket's room goes call by call. Tokens leased near the end are the
// ones left unspent in one gateway while another's request is denied,
// which must then wait for them to come back; early tokens are spent, or
// come back, while the fleet uses that half.
func contested(room, lim int64) bool {
	return room >= 0 && 2*room < lim
}
