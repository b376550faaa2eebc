package redisstore

import (
	"hash/maphash"
	"strconv"
	"testing"
)

// TestLeaseOnceSharedSlot checks that two keys whose hashes share a slot
// of the table of keys seen once (the app total and the rule of one
// request, say) are both remembered: seen once each, neither is first
// again. With one slot per key they pushed each other out on every
// request, which then never had a lease.
func TestLeaseOnceSharedSlot(t *testing.T) {
	t.Parallel()
	slot := func(k string) uint64 { return (maphash.String(leaseOnceSeed, k) | 1) % leaseOnceSlots }
	a := "app|"
	b := ""
	for i := 0; b == ""; i++ {
		if k := "app|/" + strconv.Itoa(i); slot(k) == slot(a) {
			b = k
		}
	}
	var o leaseOnce
	for round, want := range []bool{true, false, false} {
		for _, k := range []string{a, b} {
			if got := o.first(k); got != want {
				t.Errorf("round %d, %q: first %v, want %v", round, k, got, want)
			}
		}
	}
	// A third key of the same slots pushes out the one seen longest ago.
	c := ""
	for i := 0; c == ""; i++ {
		if k := "app|/c" + strconv.Itoa(i); slot(k) == slot(a) {
			c = k
		}
	}
	if !o.first(c) || !o.first(a) || o.first(c) {
		t.Errorf("a third key: want it first once, and the first key pushed out")
	}
}
