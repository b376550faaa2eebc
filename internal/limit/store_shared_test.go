package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
)

// newMemory returns a memory store for cfg or fails t.
func newMemory(t testing.TB, cfg limit.MemoryConfig) *limit.Memory {
	t.Helper()
	m, err := limit.NewMemory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMemoryUncounted runs limittest.UncountedCases through the memory store.
func TestMemoryUncounted(t *testing.T) {
	t.Parallel()
	for _, tt := range limittest.UncountedCases() {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			m := newMemory(t, limit.MemoryConfig{Shards: 4})
			for i, c := range tt.Calls {
				res := make([]limit.Result, len(c.Reqs))
				got, err := m.Allow(context.Background(), limittest.T0.Add(c.At), c.Reqs, res)
				if err != nil {
					t.Fatalf("call %d (t0%+v): %v", i, c.At, err)
				}
				if got != c.Want {
					t.Errorf("call %d (t0%+v): allowed: got %v, want %v", i, c.At, got, c.Want)
				}
				for j := range c.Reqs {
					if res[j] != c.Res[j] {
						t.Errorf("call %d (t0%+v) %s: got %+v, want %+v", i, c.At, c.Reqs[j].Key, res[j], c.Res[j])
					}
				}
			}
		})
	}
}

func TestMemorySlots(t *testing.T) {
	t.Parallel()
	m := limit.NewMemorySlots()
	limittest.RunSlotSteps(t, m, limittest.SlotTable())
	if n := m.Len(); n != 0 {
		t.Errorf("keys after every release: got %d, want 0", n)
	}
	if _, _, err := m.Acquire(context.Background(), []limit.SlotRequest{{Key: "k", Limit: 0}}); err == nil {
		t.Error("limit 0: got no error")
	}
}

// TestCalendarSteps runs limittest.CalendarCases through the memory
// store.
func TestCalendarSteps(t *testing.T) {
	t.Parallel()
	for i, tt := range limittest.CalendarCases(t) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			m := newMemory(t, limit.MemoryConfig{})
			key := "cal|/" + string(rune('a'+i))
			res := make([]limit.Result, 1)
			for j, s := range tt.Steps {
				now := limittest.T0.Add(s.At)
				if _, err := m.Allow(context.Background(), now, []limit.Request{{Key: key, Params: tt.P}}, res); err != nil {
					t.Fatalf("step %d (%v): %v", j, now, err)
				}
				want := limit.Result{Allowed: s.Allow, Limit: tt.P.Limit, Remaining: s.Remaining, RetryAfter: s.RetryAfter, Reset: s.Reset}
				if res[0] != want {
					t.Errorf("step %d (%v): got %+v, want %+v", j, now, res[0], want)
				}
			}
		})
	}
}

// TestHoldRelease runs limittest.HoldRelease on the memory store.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	limittest.HoldRelease(t, func(t *testing.T, _ time.Time) limit.Store {
		return newMemory(t, limit.MemoryConfig{})
	})
}

// TestRepeatedKey runs limittest.RepeatedKey on the memory store.
func TestRepeatedKey(t *testing.T) {
	t.Parallel()
	limittest.RepeatedKey(t, func(t *testing.T, _ time.Time) limit.Store {
		return newMemory(t, limit.MemoryConfig{})
	})
}

// TestReserve runs limittest.Reserve on the memory store.
func TestReserve(t *testing.T) {
	t.Parallel()
	limittest.Reserve(t, func(t *testing.T, _ time.Time) (limit.Store, func(time.Time)) {
		return newMemory(t, limit.MemoryConfig{}), func(time.Time) {}
	})
}

// TestOver runs limittest.Over on the memory store.
func TestOver(t *testing.T) {
	t.Parallel()
	limittest.Over(t, func(t *testing.T, _ time.Time) (limit.Store, func(time.Time)) {
		return newMemory(t, limit.MemoryConfig{}), func(time.Time) {}
	})
}
