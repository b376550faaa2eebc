package limit

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRedisLeases is the most keys a Redis store holds leases for
// (RedisConfig.Leases).
const DefaultRedisLeases = 1 << 16

// maxLeasedLimits is how many limits of one request the lease path holds
// without allocating.
const maxLeasedLimits = 8

// leaseHorizon is the shortest interval over which a lease measures the
// rate of its key's requests.
const leaseHorizon = 20 * time.Millisecond

// leases are a Redis store's leases (README, "Leases"): for a limit of a
// window algorithm (fixed_window, sliding_window), the script counts
// more than the request into the bucket or window it counts in, and the
// gateway admits that many more requests locally, without a call, until
// they are spent or that bucket ends. Every admission falls in the bucket
// it was counted in, so each limit holds for the fleet exactly as it does
// in one memory store; the tokens a gateway does not spend before the
// bucket ends are lost to the fleet.
//
// The script sizes a lease from the rate at which this gateway sees the
// key's requests (so that it lasts about until the bucket ends), at most
// the room left divided by twice the fleet's size, and at least the
// request itself: near the limit, every request is a call.
//
// A request is admitted from leases only if every limit of it has one
// with a token; it then takes one from each. It is safe for concurrent
// use.
type leases struct {
	max int
	mu  sync.Mutex
	m   map[string]*lease
	// granted counts the tokens leased beyond the requests that asked,
	// spent those admitted from leases, expired those lost when their
	// bucket ended.
	granted, spent, expired atomic.Int64
}

// lease is one key's lease: tokens counted in Redis in a bucket that
// ends at end, for limits with params.
type lease struct {
	mu     sync.Mutex
	params Params
	tokens int64
	end    int64 // ns since the store's epoch; no token is used from then
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
}

func newLeases(max int) *leases {
	return &leases{max: max, m: make(map[string]*lease)}
}

// leasable reports whether reqs may be decided with leases: every limit
// is a counted window limit of one unit (not deferred, not a charge), not
// a dry run and without a lockout (a lease never denies, so it could not
// start one).
func leasable(reqs []Request) bool {
	for i := range reqs {
		p := reqs[i].Params
		if reqs[i].Shadow || p.Lock > 0 || p.Limit <= 0 || reqs[i].units() != 1 || reqs[i].Defer || reqs[i].Charge || reqs[i].Hold || reqs[i].Release ||
			(p.Algorithm != "fixed_window" && p.Algorithm != "sliding_window") {
			return false
		}
	}
	return true
}

// get returns the lease of key, creating it when there is room.
func (ls *leases) get(key string, now int64) *lease {
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
	l := &lease{since: now}
	ls.m[key] = l
	return l
}

// sweep drops the leases that have no tokens left to use and no recent
// rate. ls.mu is held.
func (ls *leases) sweep(now int64) {
	for k, l := range ls.m {
		l.mu.Lock()
		if now >= l.end || l.tokens == 0 {
			ls.expired.Add(l.tokens)
			delete(ls.m, k)
		}
		l.mu.Unlock()
	}
}

// take admits a request from the leases of keys, writing each limit's
// Result into res, if every limit has a token left in its bucket at now
// (ns since the epoch); it takes one from each. Otherwise it takes none,
// and the request goes to Redis: with a lease, when no other request's
// lease is on its way for these keys (claim holds the leases it asks
// for, which the caller releases after the call), rates then holding the
// rate each limit's lease should cover; else as one request (rates 0).
//
// A lease is asked for before it runs out: the request that finds a
// lease down to a quarter of what it was granted goes to Redis for the
// next, while the others go on spending what is left, so that a busy key
// is rarely without tokens. One request at a time asks for a key's lease:
// the requests that find it empty meanwhile go to Redis as themselves,
// rather than each take a lease that the key's rate would not spend.
//
// A request that finds a lease empty while another asks for it gets that
// request's wait, closed when its answer is in: the caller may wait for
// it and take again, rather than call Redis for itself.
func (ls *leases) take(keys []string, reqs []Request, res []Result, now int64, rates []int64) (ok bool, claim *leaseClaim, wait <-chan struct{}) {
	var buf [maxLeasedLimits]*lease
	held := buf[:0]
	if len(keys) > len(buf) {
		held = make([]*lease, 0, len(keys))
	}
	held = held[:len(keys)]
	ls.mu.Lock()
	for i, k := range keys {
		held[i] = ls.m[k]
	}
	ls.mu.Unlock()
	var empty, low, pending, missing bool
	for i, k := range keys {
		l := held[i]
		if l == nil {
			if l = ls.get(k, now); l == nil {
				missing = true
				continue
			}
			held[i] = l
		}
		l.mu.Lock()
		l.seen++
		if l.tokens > 0 && (now >= l.end || l.params != *reqs[i].Params) {
			// The bucket ended, or a reload changed the limit: the tokens
			// are lost.
			ls.expired.Add(l.tokens)
			l.tokens = 0
		}
		switch {
		case l.tokens == 0:
			empty = true
		case 4*l.tokens <= l.last:
			low = true
		}
		pending = pending || l.pending
		l.mu.Unlock()
	}
	if missing {
		// No room for a lease of some key: one request, as without.
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
		// The rate since since, once there is something to measure;
		// since moves on every leaseHorizon.
		if d := now - l.since; d >= int64(leaseHorizon) || (l.seen > 1 && d >= int64(time.Millisecond)) {
			l.rate = float64(l.seen) * float64(time.Second) / float64(d)
			if d >= int64(leaseHorizon) {
				l.seen, l.since = 0, now
			}
		}
		rates[i] = 0
		if claim != nil {
			rates[i] = int64(l.rate + 0.5)
		}
		l.mu.Unlock()
	}
	return false, claim, wait
}

// spend takes a token from each of held, writing each limit's Result
// into res, and reports whether it could; when one has none left (taken
// meanwhile), it gives back what it took.
func (ls *leases) spend(held []*lease, res []Result, now int64) bool {
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
		res[i] = Result{
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
	leases []*lease
	ready  chan struct{}
}

// release ends the claim of a request that asked for leases: their next
// may be asked for again, and the requests waiting for this one's answer
// take again.
func (ls *leases) release(c *leaseClaim) {
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
func (ls *leases) unspent(keys []string, reqs []Request, res []Result, now int64) {
	for i, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil || res[i].Remaining < 0 {
			continue
		}
		l.mu.Lock()
		if now < l.end && l.params == *reqs[i].Params {
			res[i].Remaining += l.tokens
		}
		l.mu.Unlock()
	}
}

// grant records the tokens the script leased for keys beyond the request
// it admitted: n[i] counted in a bucket that ends span[i] after start (ns
// since the epoch, taken before the call: the bucket ends no sooner in
// this gateway's time).
func (ls *leases) grant(keys []string, reqs []Request, res []Result, n []int64, span []time.Duration, start int64) {
	for i, k := range keys {
		if n[i] <= 1 {
			continue
		}
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil {
			continue
		}
		l.mu.Lock()
		end := start + int64(span[i])
		switch {
		case l.tokens > 0 && start < l.end && l.params == *reqs[i].Params && end-l.end < int64(time.Millisecond):
			// Tokens of the same bucket (another request's lease came
			// first): keep both, until the earlier end.
			l.tokens += n[i] - 1
			l.end = min(l.end, end)
			l.last = l.tokens
		default:
			ls.expired.Add(l.tokens)
			l.params = *reqs[i].Params
			l.tokens = n[i] - 1
			l.end = end
			l.last = l.tokens
		}
		l.remaining, l.reset, l.granted = res[i].Remaining, res[i].Reset, start
		l.mu.Unlock()
		ls.granted.Add(n[i] - 1)
	}
}
