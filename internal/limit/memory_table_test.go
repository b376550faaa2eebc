package limit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkTables checks every shard's table: each entry is found from its
// home slot, n counts the entries, the load is at most maxLoad, and the
// shard counts add up to Len.
func checkTables(t *testing.T, m *Memory) {
	t.Helper()
	total := 0
	for s := range m.shards {
		sh := &m.shards[s]
		n := 0
		for i, tag := range sh.tags {
			if tag == 0 {
				if sh.ents[i] != nil {
					t.Fatalf("shard %d slot %d: empty tag with an entry", s, i)
				}
				continue
			}
			n++
			e := sh.ents[i]
			h := m.hash(e.key)
			if tagOf(h) != tag || int(m.shardOf(h)) != s {
				t.Fatalf("shard %d slot %d: key %q has tag %x shard %d, slot holds %x", s, i, e.key, tagOf(h), m.shardOf(h), tag)
			}
			if got, _ := sh.find(e.key, tag); got != e {
				t.Fatalf("shard %d slot %d: key %q not found from its home", s, i, e.key)
			}
		}
		if n != sh.n {
			t.Fatalf("shard %d: n %d, counted %d", s, sh.n, n)
		}
		if len(sh.tags) > 0 && n*maxLoadDen > len(sh.tags)*maxLoadNum {
			t.Fatalf("shard %d: %d in %d slots", s, n, len(sh.tags))
		}
		total += n
	}
	if total != m.Len() {
		t.Fatalf("Len %d, entries %d", m.Len(), total)
	}
}

func TestMemoryTableMatchesMap(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 2, 8} {
		t.Run(fmt.Sprint(shards), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(shards), 7))
			m := newTestMemory(t, MemoryConfig{Shards: shards})
			const limit = 1_000_000
			long := swParams(limit, time.Hour, 10)
			short := swParams(limit, time.Second, 10)
			type ref struct {
				count int64
				short bool
			}
			want := map[string]*ref{}
			ctx := context.Background()
			now := t0
			res := make([]Result, 2)
			for step := range 60_000 {
				switch op := rng.IntN(1000); {
				case op < 3: // forget a random third
					salt := rng.Uint64()
					drop := func(k string) bool { return (m.hash(k)^salt)%3 == 0 }
					n := 0
					for k := range want {
						if drop(k) {
							delete(want, k)
							n++
						}
					}
					if got := m.Forget(func(k string) bool { return !drop(k) }); got != n {
						t.Fatalf("step %d: Forget: got %d, want %d", step, got, n)
					}
					checkTables(t, m)
				case op < 5: // sweep the short keys
					now = now.Add(2 * time.Second)
					n := 0
					for k, r := range want {
						if r.short {
							delete(want, k)
							n++
						}
					}
					if got := m.Sweep(now); got != n {
						t.Fatalf("step %d: Sweep: got %d, want %d", step, got, n)
					}
					checkTables(t, m)
				default:
					nreq := 1 + rng.IntN(2)
					reqs := make([]Request, 0, 2)
					for len(reqs) < nreq {
						k := fmt.Sprintf("k%d", rng.IntN(3000))
						if len(reqs) == 1 && reqs[0].Key == k {
							continue
						}
						r, ok := want[k]
						if !ok {
							r = &ref{short: rng.IntN(2) == 0}
						}
						p := long
						if r.short {
							p = short
						}
						reqs = append(reqs, Request{Key: k, Params: p})
					}
					ok, err := m.Allow(ctx, now, reqs, res)
					if err != nil || !ok {
						t.Fatalf("step %d: Allow: %v %v", step, ok, err)
					}
					for i, req := range reqs {
						r, seen := want[req.Key]
						if !seen {
							r = &ref{short: req.Params == short}
							want[req.Key] = r
						}
						if got, w := res[i].Remaining, limit-r.count-1; got != w {
							t.Fatalf("step %d: %s: remaining %d, want %d", step, req.Key, got, w)
						}
						r.count++
					}
				}
				if m.Len() != len(want) {
					t.Fatalf("step %d: Len %d, want %d", step, m.Len(), len(want))
				}
			}
			checkTables(t, m)
			// Sweep everything: tables are released.
			if got := m.Sweep(now.Add(2 * time.Hour)); got != len(want) {
				t.Fatalf("final Sweep: got %d, want %d", got, len(want))
			}
			for s := range m.shards {
				if m.shards[s].tags != nil {
					t.Errorf("shard %d: table kept after its last key", s)
				}
			}
		})
	}
}

// TestMemorySweepShrinks checks that sweeps that leave a shard mostly
// empty shrink its table, so that the memory of a flood of callers is
// returned once they are swept, and release it with the last key.
func TestMemorySweepShrinks(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{Shards: 1})
	ctx := context.Background()
	short := swParams(10, time.Second, 10)
	long := swParams(10, time.Hour, 10)
	res := make([]Result, 1)
	allow := func(key string, p *Params) {
		t.Helper()
		if _, err := m.Allow(ctx, t0, []Request{{Key: key, Params: p}}, res); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		allow(fmt.Sprintf("flood-%d", i), short)
	}
	for i := range 10 {
		allow(fmt.Sprintf("kept-%d", i), long)
	}
	sh := &m.shards[0]
	// 1010 keys at a load of at most 3/4 take 2048 slots; each sweep that
	// finds the table under 1/8 full quarters it, down to 32 slots for
	// the 10 keys left.
	tests := []struct {
		name           string
		at             time.Duration
		evicted, slots int
	}{
		{name: "nothing idle", at: 0, evicted: 0, slots: 2048},
		{name: "the flood swept", at: time.Minute, evicted: 1000, slots: 512},
		{name: "a sweep later", at: 2 * time.Minute, evicted: 0, slots: 128},
		{name: "another", at: 3 * time.Minute, evicted: 0, slots: 32},
		{name: "and another", at: 4 * time.Minute, evicted: 0, slots: 32},
		{name: "everything swept", at: 2 * time.Hour, evicted: 10, slots: 0},
	}
	for _, tt := range tests {
		if got := m.Sweep(t0.Add(tt.at)); got != tt.evicted {
			t.Errorf("%s: evicted %d, want %d", tt.name, got, tt.evicted)
		}
		if got := len(sh.tags); got != tt.slots {
			t.Errorf("%s: %d slots, want %d", tt.name, got, tt.slots)
		}
		checkTables(t, m)
	}
	if sh.tags != nil {
		t.Errorf("the table is kept after its last key")
	}
}
