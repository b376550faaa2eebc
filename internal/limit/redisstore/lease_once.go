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
// come once) then costs no lease's bookkeeping. It is a direct-mapped
// table of the keys' hashes: a key whose slot another took meanwhile
// counts as not seen, which only puts off its lease by a request. It is
// safe for concurrent use; the zero value is empty.
type leaseOnce struct {
	slots [leaseOnceSlots]atomic.Uint64
}

// first reports whether key was not seen since its slot last changed, and
// remembers it.
func (o *leaseOnce) first(key string) bool {
	h := maphash.String(leaseOnceSeed, key) | 1 // 0 is an empty slot
	s := &o.slots[h%leaseOnceSlots]
	if s.Load() == h {
		return false
	}
	s.Store(h)
	return true
}
