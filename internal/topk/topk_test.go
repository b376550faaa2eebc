package topk

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSketchGuarantees checks the space-saving guarantees on random
// streams: every key with more than N/k of the occurrences is listed, and
// every listed count is an upper bound whose error is at most N/k and
// leaves a lower bound.
func TestSketchGuarantees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		k, n      int
		distinct  int
		heavy     int     // keys given the heavy share
		heavyFrac float64 // share of the stream each heavy key gets
	}{
		{name: "few keys", k: 8, n: 10_000, distinct: 5, heavy: 1, heavyFrac: 0.3},
		{name: "long tail", k: 16, n: 50_000, distinct: 20_000, heavy: 3, heavyFrac: 0.08},
		{name: "all distinct", k: 32, n: 100_000, distinct: 1 << 30, heavy: 2, heavyFrac: 0.05},
		{name: "k of 1", k: 1, n: 5_000, distinct: 1000, heavy: 1, heavyFrac: 0.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(tc.k)))
			s := New(tc.k)
			truth := map[string]int64{}
			for range tc.n {
				var key string
				if x := rng.Float64(); x < float64(tc.heavy)*tc.heavyFrac {
					key = "heavy-" + strconv.Itoa(int(x/tc.heavyFrac))
				} else {
					key = strconv.Itoa(rng.IntN(tc.distinct))
				}
				truth[key]++
				s.Add(key, rng.IntN(4) > 0)
			}
			if got := s.N(); got != int64(tc.n) {
				t.Errorf("N: got %d, want %d", got, tc.n)
			}
			if len(s.entries) > tc.k || len(s.index) > tc.k {
				t.Errorf("size: got %d entries, %d indexed, want at most %d", len(s.entries), len(s.index), tc.k)
			}
			bound := int64(tc.n / tc.k)
			keys, _ := Top(tc.k, s)
			listed := map[string]Key{}
			for _, k := range keys {
				listed[k.Key] = k
				tr := truth[k.Key]
				if k.Count < tr || k.Count-k.Error > tr {
					t.Errorf("%s: count %d error %d do not bound the true %d", k.Key, k.Count, k.Error, tr)
				}
				if k.Error > bound {
					t.Errorf("%s: error %d, want at most N/k = %d", k.Key, k.Error, bound)
				}
				if k.Admitted+k.Limited != k.Count-k.Error {
					t.Errorf("%s: admitted %d + limited %d, want count-error %d", k.Key, k.Admitted, k.Limited, k.Count-k.Error)
				}
			}
			for key, c := range truth {
				if c > bound {
					if _, ok := listed[key]; !ok {
						t.Errorf("%s: %d of %d occurrences (more than N/k = %d) but not listed", key, c, tc.n, bound)
					}
				}
			}
			for i := 1; i < len(keys); i++ {
				if keys[i].Count > keys[i-1].Count {
					t.Errorf("order: %s (%d) after %s (%d)", keys[i].Key, keys[i].Count, keys[i-1].Key, keys[i-1].Count)
				}
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxKeyLen) // 2 bytes a rune
	for _, tc := range []struct {
		name, in string
		want     int
	}{
		{name: "short", in: "user-42", want: 7},
		{name: "ascii at the bound", in: strings.Repeat("a", MaxKeyLen), want: MaxKeyLen},
		{name: "ascii past the bound", in: strings.Repeat("a", MaxKeyLen+5), want: MaxKeyLen},
		{name: "multibyte", in: long, want: MaxKeyLen},
		{name: "multibyte split", in: "a" + long, want: MaxKeyLen - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.in)
			if len(got) != tc.want || !strings.HasPrefix(tc.in, got) {
				t.Errorf("Truncate: got %d bytes, want %d", len(got), tc.want)
			}
		})
	}
}

// TestWindow steps through fixed instants: keys stay listed for one to
// two periods, then leave.
func TestWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	w := NewWindow(4, time.Minute)
	type step struct {
		at      time.Duration
		add     string // key added at this instant, if any
		want    string // keys listed, heaviest first, comma-separated
		wantN   int64
		wantOld time.Duration // when the window began, from t0
	}
	steps := []step{
		{at: 0, add: "a", want: "a", wantN: 1},
		{at: 10 * time.Second, add: "a", want: "a", wantN: 2},
		{at: 30 * time.Second, add: "b", want: "a,b", wantN: 3},
		{at: 70 * time.Second, add: "c", want: "a,b,c", wantN: 4},          // a, b in the previous generation
		{at: 125 * time.Second, want: "c", wantN: 1, wantOld: time.Minute}, // a and b gone
		{at: 190 * time.Second, want: "", wantN: 0},                        // everything gone
		{at: 200 * time.Second, add: "d", want: "d", wantN: 1, wantOld: 3 * time.Minute},
	}
	for i, st := range steps {
		now := t0.Add(st.at)
		if st.add != "" {
			w.Add(now, st.add, true)
		}
		keys, n, from := w.Top(now)
		names := make([]string, len(keys))
		for j, k := range keys {
			names[j] = k.Key
		}
		if got := strings.Join(names, ","); got != st.want || n != st.wantN {
			t.Errorf("step %d (t0+%s): got %q (%d), want %q (%d)", i, st.at, got, n, st.want, st.wantN)
		}
		if n > 0 && !from.Equal(t0.Add(st.wantOld)) {
			t.Errorf("step %d (t0+%s): window from %s, want t0+%s", i, st.at, from, st.wantOld)
		}
	}
}

func BenchmarkSketchAdd(b *testing.B) {
	for _, bc := range []struct {
		name     string
		distinct int
	}{{"heavy", 16}, {"flood", 1 << 30}} {
		b.Run(bc.name, func(b *testing.B) {
			keys := make([]string, 4096)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range keys {
				keys[i] = strconv.Itoa(rng.IntN(bc.distinct))
			}
			s := New(32)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s.Add(keys[i%len(keys)], true)
			}
		})
	}
}
