package redisstore

import (
	"hash/maphash"
	"sync/atomic"
)

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
