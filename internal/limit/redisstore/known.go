package redisstore

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// known remembers what Redis last said of each key this gateway asked
// about, so that a gateway that decides alone while Redis does not answer
// (--fail-mode local) starts from the fleet's last known state rather
// than from an empty counter: a key Redis last reported full stays
// refused until the instant Redis gave, and the room of a key is a share
// of what Redis last said remained (docs/fleet.md, "When Redis fails").
//
// Like the deny cache it is direct-mapped, with a per-process seed: its
// memory is fixed at creation, and a key whose slot another took is
// simply not known (its local room is a share of the limit). It is safe
// for concurrent use.
type known struct {
	seed  maphash.Seed
	mask  uint64
	slots []knownSlot
	locks [denyLocks]struct {
		sync.Mutex
		_ [64 - 8]byte
	}
}

// knownSlot is what Redis said of key under params, at the store's clock
// at (ns since its creation): remaining, and the instants (same clock) when
// the limit is full again (reset) and, for a denial, when the request it
// denied would be admitted (retry; 0 when it admitted).
type knownSlot struct {
	key                string
	params             limit.Params
	remaining          int64
	at, reset, retryAt int64
}

// knownSize is the number of keys known keeps: about 2 MB.
const knownSize = 1 << 14

func newKnown(size int) *known {
	d := newDenyCache(size) // for its rounding of size
	return &known{seed: maphash.MakeSeed(), mask: d.mask, slots: make([]knownSlot, len(d.slots))}
}

func (k *known) slot(key string) (*knownSlot, *sync.Mutex) {
	i := maphash.String(k.seed, key) & k.mask
	return &k.slots[i], &k.locks[i%denyLocks].Mutex
}

// record remembers Redis's answer res to reqs, sent at start. A read
// (limit.Read) is not an answer to remember: it changed nothing, and
// behind a queue of reservations it is answered as of the queue's end.
func (k *known) record(reqs []limit.Request, res []limit.Result, start int64) {
	for i := range reqs {
		q, r := &reqs[i], &res[i]
		if q.Params.Limit <= 0 || q.Act == limit.Read {
			continue
		}
		// An admission at a reserved instant (Delay) reports the limit
		// as of that instant.
		at := start + int64(r.Delay)
		e := knownSlot{key: q.Key, params: *q.Params, remaining: r.Remaining, at: at, reset: at + int64(r.Reset)}
		if !r.Allowed && r.RetryAfter > 0 {
			e.retryAt = start + int64(r.RetryAfter)
		}
		s, mu := k.slot(q.Key)
		mu.Lock()
		*s = e
		mu.Unlock()
	}
}

// get returns what Redis last said of key under p (the same counter: the
// same shape; the limit may be a share of it), if it still holds at now:
// not once the limit is full again, nor, for a window, once the request
// Redis denied would be admitted (its room from then on is not known). A
// bucket's denial holds until the bucket is full again: it refills on a
// known line from what Redis said (Store.Known), so that a bucket Redis
// last said was empty is not taken for full once a token came back.
func (k *known) get(key string, p *limit.Params, now int64) (knownSlot, bool) {
	s, mu := k.slot(key)
	mu.Lock()
	e := *s
	mu.Unlock()
	if e.key != key || !e.params.Identity(p) || now >= e.reset || (e.retryAt > 0 && now >= e.retryAt && !bucket(&e.params)) {
		// Not the counter, or no longer what Redis said: the limit is
		// full again, or the request Redis denied a window would be
		// admitted now.
		return knownSlot{}, false
	}
	return e, true
}

// Known is what Redis last said of a limit's counter (Store.Known).
type Known struct {
	// Capacity is the capacity of the fleet's limit Redis decided on
	// (limit.Params.Capacity).
	Capacity int64
	// Used is what the counter held then, out of Capacity (for a bucket,
	// less what it has refilled since): a reload may have changed the
	// limit since, not what was counted.
	Used int64
	// Reset is the time from now until the limit is full again, as Redis
	// said; beyond it, nothing is known.
	Reset time.Duration
	// RetryAfter is, when Redis last denied a request on the counter,
	// the time from now until that request would have been admitted; 0
	// when it admitted, or that time has passed.
	RetryAfter time.Duration
}

// Known returns what Redis last said of q's counter, of q's Params' shape
// (their Limit may be a local share of the fleet's), if this gateway
// asked about it and that still holds: before the limit is full again. A local decision while Redis does not answer starts
// from it.
func (r *Store) Known(q *limit.Request) (Known, bool) {
	if r.known == nil || q.Params == nil {
		return Known{}, false
	}
	now := r.clock()
	e, ok := r.known.get(q.Key, q.Params, now)
	if !ok {
		return Known{}, false
	}
	rem := e.remaining
	c := e.params.Capacity()
	from := e.line()
	if bucket(&e.params) && e.reset > from && now > from {
		// A bucket refills at a steady rate from what it had to full at
		// reset: what it has now is on that line. (A window frees its
		// counts only as they leave it: until reset, no more is known
		// than what it had.)
		rem += int64(float64(c-rem) * float64(now-from) / float64(e.reset-from))
	}
	retry := max(e.retryAt-now, 0)
	if bucket(&e.params) && rem < 1 && retry == 0 && e.reset > from && c > e.remaining {
		// Past the instant Redis gave, the line has yet to bring back a
		// whole token (the denied request's cost was below one, or the
		// line rounds down): retry when it does, not at reset.
		next := from + int64(math.Ceil(float64(1-e.remaining)*float64(e.reset-from)/float64(c-e.remaining)))
		retry = max(next-now, int64(time.Millisecond))
	}
	return Known{Capacity: c, Used: max(c-rem, 0), Reset: time.Duration(e.reset - now), RetryAfter: time.Duration(retry)}, true
}

// line returns the instant a bucket's refill line leaves e.remaining: at,
// when Redis said it, or, for a request refused behind a queue of
// reservations (which Redis decided at the queue's end, with a reset
// that long later), the queue's end, from which the bucket takes the
// time its rate needs to refill from e.remaining to full.
func (e *knownSlot) line() int64 {
	p := &e.params
	if !bucket(p) || p.Limit <= 0 {
		return e.at
	}
	refill := float64(p.Capacity()-e.remaining) * float64(p.Window) / float64(p.Limit)
	return max(e.at, e.reset-int64(math.Ceil(refill)))
}

// bucket reports whether p's algorithm is a bucket: its capacity is
// Burst, and its room grows at a steady rate.
func bucket(p *limit.Params) bool {
	return p.Algorithm == "token_bucket" || p.Algorithm == "leaky_bucket"
}

// Bounded returns p, a local share of a fleet's limit, bounded by share
// of the room k says the fleet's counter has, out of capacity, the fleet
// limit's capacity now (a reload may have changed it since Redis
// answered), and rounded up. For a window, that bounds its Limit: its
// room stays what Redis said until the window moves on. A bucket keeps
// its Burst and rate, and level is the most it may hold now (-1 for a
// window): the fleet's room grows on the bucket's refill line (Known), and
// so does the local bucket's, so that one that holds no more than level
// when it starts to decide never gets ahead of that line; a local bucket
// bounded by its Burst instead would refill on its own and grow with the
// line too, twice its share. full reports that the counter has no room:
// the request is refused, until the instant Redis gave (RetryAfter, else
// Reset).
func (k Known) Bounded(p limit.Params, share float64, capacity int64) (q limit.Params, level int64, full bool) {
	room := capacity - k.Used
	if room <= 0 {
		return p, -1, true
	}
	local := max(int64(math.Ceil(share*float64(room)-1e-9)), 1)
	if bucket(&p) {
		return p, min(local, p.Capacity()), false
	}
	q = p
	q.Limit = min(p.Limit, local)
	if q.Validate() != nil {
		return p, -1, true // no valid bound: refuse rather than admit the whole share
	}
	return q, -1, false
}
