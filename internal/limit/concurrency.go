package limit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// MaxConcurrency is the largest concurrency a rule may set.
const MaxConcurrency = 1_000_000

// SlotRequest asks for one slot of a concurrency limit (concurrency in the
// docs/algorithms.md, "Concurrency: requests in flight"): at most Limit requests hold
// a slot of Key at once.
type SlotRequest struct {
	// Key names the in-flight count, e.g. "app-1|/v1/upload".
	Key string
	// Tag groups keys for the Redis store as Request.Tag does: the
	// requests of one Acquire must have the same Tag. Empty means the
	// part of Key before its first "|". The memory store ignores it.
	Tag string
	// Limit is the most requests in flight on Key, at least 1.
	Limit int64
}

// Slots keeps in-flight counts. Implementations are safe for concurrent
// use.
type Slots interface {
	// Acquire takes one slot of every request's key, or none of them.
	// When every key has room it returns a Permit holding the slots and
	// -1; otherwise a nil Permit and the index of the first request whose
	// key holds Limit slots already, having taken nothing. An error means
	// the store could not decide; nothing is held then either.
	Acquire(ctx context.Context, reqs []SlotRequest) (Permit, int, error)
}

// Permit is the slots one Acquire took. (Not to be confused with the
// Redis store's token leases, which hold units of a rate limit.)
type Permit interface {
	// Release gives the slots back. Calls after the first do nothing. It
	// never blocks longer than a store call's timeout; slots a store
	// fails to release expire on their own (the Redis store's).
	Release()
}

// MemorySlots is the in-process Slots: a count per key, exact. A key is
// dropped when its count returns to 0, so memory holds only keys with
// requests in flight. The zero value is ready to use; it is safe for
// concurrent use.
type MemorySlots struct {
	mu sync.Mutex
	n  map[string]int64
}

var _ Slots = (*MemorySlots)(nil)

// NewMemorySlots returns an empty MemorySlots.
func NewMemorySlots() *MemorySlots { return &MemorySlots{} }

// Acquire implements Slots. It never fails (for a valid Limit).
func (m *MemorySlots) Acquire(_ context.Context, reqs []SlotRequest) (Permit, int, error) {
	if len(reqs) > MaxSlotKeys {
		return nil, -1, fmt.Errorf("limit: %d slot requests, at most %d", len(reqs), MaxSlotKeys)
	}
	for i := range reqs {
		if reqs[i].Limit < 1 {
			return nil, -1, fmt.Errorf("limit: slot of %q has limit %d, want at least 1", reqs[i].Key, reqs[i].Limit)
		}
	}
	l := &memoryPermit{m: m, n: len(reqs)}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range reqs {
		// Two requests of one call on the same key need two slots.
		need := int64(1)
		for j := range i {
			if reqs[j].Key == reqs[i].Key {
				need++
			}
		}
		if m.n[reqs[i].Key]+need > reqs[i].Limit {
			return nil, i, nil
		}
	}
	if m.n == nil {
		m.n = map[string]int64{}
	}
	for i := range reqs {
		m.n[reqs[i].Key]++
		l.keys[i] = reqs[i].Key
	}
	return l, -1, nil
}

// InFlight returns the slots of key that are held.
func (m *MemorySlots) InFlight(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

// Len returns the number of keys with a slot held.
func (m *MemorySlots) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.n)
}

// MaxSlotKeys is the most requests one Acquire takes a slot for: the
// proxy's app total and API rule.
const MaxSlotKeys = 2

type memoryPermit struct {
	m        *MemorySlots
	keys     [MaxSlotKeys]string
	n        int
	released atomic.Bool
}

func (l *memoryPermit) Release() {
	if l.released.Swap(true) {
		return
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for _, k := range l.keys[:l.n] {
		if c := l.m.n[k] - 1; c > 0 {
			l.m.n[k] = c
		} else {
			delete(l.m.n, k)
		}
	}
}
