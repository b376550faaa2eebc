package redisstore

import (
	"hash/maphash"
	"sync/atomic"
)

// reuses are the strings a store's calls share (reused).
type reuses struct {
	settings reused[settingsParts]
	budget   reused[budgetParts]
}

// reused keeps strings that the store's calls make again and again from
// the same parts, so that the calls of a rule share one: the settings
// argument of a limit (scriptSettings), a call's key budget argument
// (budgetArgs) and the key of the hash of its memos (memoKey). Every
// call of a rule would otherwise make each of them anew, with the same
// bytes, and leave it to the garbage collector; on the cold path, where
// every request is a call, those are a few of the gateway's allocations
// per request.
//
// It is a fixed number of slots, each holding the last string made for
// the parts that hash to it, compared in full before use: a parts value
// that misses (a slot another took, or parts never seen) is made and
// stored, so the cache holds at most reusedSlots strings whatever the
// callers send.
type reused[K comparable] struct {
	slots [reusedSlots]atomic.Pointer[reusedEntry[K]]
}

type reusedEntry[K comparable] struct {
	k K
	v string
	a any // v, as a script argument: made once, as v is
}

// reusedSlots is the number of slots of a reused: more than the rules of
// most configurations that a busy gateway decides at once.
const reusedSlots = 64

var reusedSeed = maphash.MakeSeed()

// get returns the string of k: the one stored for it, or build(k), which
// it stores.
func (c *reused[K]) get(k K, build func(K) string) string { return c.entry(k, build).v }

// arg returns the string of k as get does, as a script argument.
func (c *reused[K]) arg(k K, build func(K) string) any { return c.entry(k, build).a }

func (c *reused[K]) entry(k K, build func(K) string) *reusedEntry[K] {
	slot := &c.slots[maphash.Comparable(reusedSeed, k)%reusedSlots]
	if e := slot.Load(); e != nil && e.k == k {
		return e
	}
	v := build(k)
	e := &reusedEntry[K]{k: k, v: v, a: v}
	slot.Store(e)
	return e
}
