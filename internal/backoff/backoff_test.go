package backoff

import (
	"math/rand/v2"
	"testing"
	"time"
)

func seeded() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// TestCeilings checks that each wait is within its ceiling, that the
// ceiling doubles up to Max and stays there, and that Reset starts again.
func TestCeilings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		b          Backoff
		ceilings   []time.Duration
		afterReset time.Duration
	}{
		{
			name:       "doubling to the cap",
			b:          Backoff{Base: 100 * time.Millisecond, Max: time.Second},
			ceilings:   []time.Duration{100e6, 200e6, 400e6, 800e6, 1e9, 1e9, 1e9},
			afterReset: 100e6,
		},
		{
			name:       "defaults",
			ceilings:   []time.Duration{DefaultBase, 2 * DefaultBase, 4 * DefaultBase},
			afterReset: DefaultBase,
		},
		{
			name:       "max below base",
			b:          Backoff{Base: time.Second, Max: time.Millisecond},
			ceilings:   []time.Duration{time.Second, time.Second},
			afterReset: time.Second,
		},
		{
			name:       "cap not a power of two of base",
			b:          Backoff{Base: 50 * time.Millisecond, Max: 120 * time.Millisecond},
			ceilings:   []time.Duration{50e6, 100e6, 120e6, 120e6},
			afterReset: 50e6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.b
			b.Rand = seeded()
			for i, c := range tt.ceilings {
				if got := b.ceilingNow(); got != c {
					t.Errorf("step %d: ceiling %v, want %v", i, got, c)
				}
				if w := b.Next(); w < 0 || w > c {
					t.Errorf("step %d: wait %v, want within [0, %v]", i, w, c)
				}
			}
			b.Reset()
			if got := b.ceilingNow(); got != tt.afterReset {
				t.Errorf("after Reset: ceiling %v, want %v", got, tt.afterReset)
			}
		})
	}
}

// ceilingNow is the ceiling of the next wait, as Next computes it.
func (b *Backoff) ceilingNow() time.Duration {
	c := *b
	c.Rand = rand.New(maxSource{})
	return c.Next()
}

// maxSource makes Int64N(n) return n-1: the ceiling itself.
type maxSource struct{}

func (maxSource) Uint64() uint64 { return ^uint64(0) }

// TestJitter checks that the waits are spread over [0, ceiling] rather
// than fixed: at the cap, a seeded run draws from both halves and its
// mean is near half the cap.
func TestJitter(t *testing.T) {
	t.Parallel()
	const limit = time.Second
	b := Backoff{Base: limit, Max: limit, Rand: seeded()}
	var sum time.Duration
	low, high := 0, 0
	const n = 1000
	for range n {
		w := b.Next()
		if w < 0 || w > limit {
			t.Fatalf("wait %v outside [0, %v]", w, limit)
		}
		if w < limit/2 {
			low++
		} else {
			high++
		}
		sum += w
	}
	if low == 0 || high == 0 {
		t.Errorf("waits not spread: %d below half the cap, %d above", low, high)
	}
	if mean := sum / n; mean < 4*limit/10 || mean > 6*limit/10 {
		t.Errorf("mean wait %v, want near %v", mean, limit/2)
	}
}

// TestGlobalRand checks that a Backoff without Rand still draws within
// its ceiling.
func TestGlobalRand(t *testing.T) {
	t.Parallel()
	var b Backoff
	for i := range 5 {
		if w := b.Next(); w < 0 || w > DefaultBase<<i {
			t.Errorf("step %d: wait %v, want within [0, %v]", i, w, DefaultBase<<i)
		}
	}
}
