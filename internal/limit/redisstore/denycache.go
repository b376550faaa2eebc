package redisstore

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// denyLocks is the number of mutexes that guard a denyCache's slots.
const denyLocks = 64

// denyCache remembers which keys Redis denied and until when, so that a
// caller who keeps asking while denied costs Redis nothing: the Redis
// store answers from here until the denial's end (the deny cache of the
// docs/fleet.md, "Redis: one limit for a fleet of gateways").
//
// It is direct-mapped: a key has one slot, chosen by a hash with a
// per-process seed, and a new entry replaces whatever held the slot. Its
// memory is fixed at creation however many keys a flood brings; a
// collision only costs a Redis call. It is safe for concurrent use.
//
// Besides the denied keys of a denied request it keeps, for as long as
// the denial lasts, what Redis said about that request's other limits, so
// that a local denial carries the same rate-limit headers as Redis's.
type denyCache struct {
	seed  maphash.Seed
	mask  uint64
	slots []denySlot
	locks [denyLocks]struct {
		sync.Mutex
		_ [64 - 8]byte // one mutex per cache line
	}
}

// denySlot is one entry. Instants are nanoseconds on the gateway's clock
// since the store's creation.
type denySlot struct {
	key    string
	params limit.Params
	// until is when the denial ends; stop when the entry stops holding,
	// no later.
	until, stop int64
	// denied reports whether the key denies a request of cost units or
	// more until until (= retry); else the entry describes a limit that
	// admitted a request that another limit denied.
	denied bool
	// cost is the cost of the denied request. The cache answers only for
	// the same cost: a smaller cost may fit, and a greater one is denied
	// for longer than Redis said of this one, by how much only Redis
	// knows.
	cost      int64
	remaining int64
	reset     int64 // when the limit is fully replenished
}

func newDenyCache(size int) *denyCache {
	size = 1 << bits.Len(uint(max(size, 1)-1)) // round up to a power of two
	return &denyCache{seed: maphash.MakeSeed(), mask: uint64(size - 1), slots: make([]denySlot, size)}
}

func (c *denyCache) slot(key string) (*denySlot, *sync.Mutex) {
	i := maphash.String(c.seed, key) & c.mask
	return &c.slots[i], &c.locks[i%denyLocks].Mutex
}

// get returns key's entry if it holds at now for a request of cost units
// under p.
func (c *denyCache) get(key string, p *limit.Params, cost, now int64) (denySlot, bool) {
	s, mu := c.slot(key)
	mu.Lock()
	if s.key != key {
		// Most keys have no entry (on the cold path, none does): the
		// rest of the slot is not read.
		mu.Unlock()
		return denySlot{}, false
	}
	e := *s
	mu.Unlock()
	if e.stop <= now || e.params != *p || (e.denied && cost != e.cost) {
		return denySlot{}, false
	}
	return e, true
}

func (c *denyCache) put(key string, e denySlot) {
	e.key = key
	s, mu := c.slot(key)
	mu.Lock()
	*s = e
	mu.Unlock()
}

// lookup answers reqs (whose store keys are keys) at now from the cache
// and reports whether it could: only when a non-shadow limit of the
// request is known to deny its cost at now and the cache knows what Redis
// last said about every other one. It then writes res as Redis would have.
func (c *denyCache) lookup(keys []string, reqs []limit.Request, now int64, res []limit.Result) bool {
	hit := false
	for i := range reqs {
		p := reqs[i].Params
		e, ok := c.get(keys[i], p, reqs[i].Units(), now)
		if !ok {
			return false
		}
		if e.denied {
			res[i] = limit.Result{
				Limit:      p.Limit,
				Reset:      time.Duration(max(e.reset, e.until) - now),
				RetryAfter: time.Duration(e.until - now),
			}
			hit = hit || !reqs[i].Shadow
			continue
		}
		res[i] = limit.Result{Allowed: true, Limit: p.Limit, Remaining: e.remaining, Reset: time.Duration(max(e.reset-now, 0))}
	}
	return hit
}

// record remembers what Redis answered to a request it denied, sent at
// start: each denying limit denies until start + RetryAfter (Redis's
// instant was no earlier than start, so the local denial never outlasts
// Redis's), and the others are remembered for as long as the longest
// enforced denial; none beyond upto, unless it is 0.
func (c *denyCache) record(keys []string, reqs []limit.Request, res []limit.Result, start, upto int64) {
	var until int64
	for i := range reqs {
		if !res[i].Allowed && !reqs[i].Shadow && res[i].RetryAfter > 0 {
			until = max(until, start+int64(res[i].RetryAfter))
		}
	}
	stop := until
	if upto > 0 {
		stop = min(until, upto)
	}
	if until == 0 {
		return
	}
	for i := range reqs {
		r := &res[i]
		e := denySlot{params: *reqs[i].Params, reset: start + int64(r.Reset), stop: stop}
		switch {
		case !r.Allowed && r.RetryAfter > 0:
			e.denied, e.until, e.cost = true, start+int64(r.RetryAfter), reqs[i].Units()
			e.stop = min(e.stop, e.until)
		case r.Allowed:
			e.until, e.remaining = until, r.Remaining
		default:
			continue
		}
		c.put(keys[i], e)
	}
}
