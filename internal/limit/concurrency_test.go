package limit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestMemorySlotsNeverOverLimit is the guarantee: however acquisitions and
// releases interleave, no key ever has more than its limit in flight, and
// every count returns to 0.
func TestMemorySlotsNeverOverLimit(t *testing.T) {
	t.Parallel()
	m := NewMemorySlots()
	const limit = 3
	var held [4]atomic.Int64
	var over atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				k := rng.IntN(len(held))
				l, _, err := m.Acquire(context.Background(), []SlotRequest{{Key: fmt.Sprint(k), Limit: limit}})
				if err != nil {
					t.Error(err)
					return
				}
				if l == nil {
					continue
				}
				if held[k].Add(1) > limit {
					over.Add(1)
				}
				held[k].Add(-1)
				l.Release()
			}
		})
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Errorf("a key had more than %d in flight %d times", limit, over.Load())
	}
	if n := m.Len(); n != 0 {
		t.Errorf("keys after every release: got %d, want 0", n)
	}
}
