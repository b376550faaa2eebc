package redisstore

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// recentSlots is the size of a store's table of recent keys (recent).
const recentSlots = 1 << 16

// recent remembers, roughly, which keys the store asked Redis about
// lately. A key it has not asked about within the key's window is
// probably new to Redis too, and the script then asks whether it exists
// before it reads its fields ("?", redis.lua): less work for Redis on a
// new key, a little more on one that exists. Each slot holds a
// fingerprint of the last key hashed to it and the second it was asked
// about; a collision costs that little more, never a wrong decision.
type recent struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

func newRecent() *recent {
	return &recent{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, recentSlots)}
}

// asked records that the store asks Redis about key at now, and reports
// whether it had asked about it within the last window (at least the
// same second).
func (t *recent) asked(key string, now time.Time, window time.Duration) bool {
	h := maphash.String(t.seed, key)
	s := &t.slots[h&(recentSlots-1)]
	sec := uint64(uint32(now.Unix()))
	old := s.Swap(h&^0xffffffff | sec)
	if old&^0xffffffff != h&^0xffffffff {
		return false
	}
	// uint32 arithmetic: an older second reads as a small difference
	// across the wrap in 2106, a later one (a clock stepped back) as a
	// huge one.
	return uint32(sec)-uint32(old) <= uint32(window/time.Second)
}
