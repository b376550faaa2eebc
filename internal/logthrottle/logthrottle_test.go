package logthrottle

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestAllow steps a Throttle through fixed instants.
func TestAllow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		every time.Duration
		steps []struct {
			at   time.Duration // after t0
			want bool
		}
	}{
		{
			name: "default, once a second",
			steps: []struct {
				at   time.Duration
				want bool
			}{
				{0, true}, {time.Millisecond, false}, {999 * time.Millisecond, false},
				{time.Second, true}, {1500 * time.Millisecond, false}, {5 * time.Second, true},
			},
		},
		{
			name:  "every 10s",
			every: 10 * time.Second,
			steps: []struct {
				at   time.Duration
				want bool
			}{
				{0, true}, {9 * time.Second, false}, {10 * time.Second, true}, {11 * time.Second, false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := Throttle{Every: tt.every}
			for i, s := range tt.steps {
				if got := th.Allow(t0.Add(s.at)); got != s.want {
					t.Errorf("step %d (t0+%v): got %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

// TestAllowConcurrent checks that of callers racing at one instant, one
// is let through.
func TestAllowConcurrent(t *testing.T) {
	t.Parallel()
	var th Throttle
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 16 {
		wg.Go(func() {
			if th.Allow(t0) {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 1 {
		t.Errorf("got %d let through, want 1", allowed)
	}
}
