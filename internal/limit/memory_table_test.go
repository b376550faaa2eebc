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
						req := Request{Key: k, Params: p}
						switch rng.IntN(4) {
						case 0:
							req.Hash = m.Hash(k)
						case 1:
							req.Hash = rng.Uint64() | 1 // wrong
						}
						reqs = append(reqs, req)
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

// TestMemoryWrongHash checks that a wrong Request.Hash neither creates a
// second counter for a key nor loses its count.
func TestMemoryWrongHash(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{Shards: 4})
	other := newTestMemory(t, MemoryConfig{Shards: 4})
	p := swParams(10, time.Second, 10)
	ctx := context.Background()
	res := make([]Result, 2)
	keys := []string{"app-1", "app-1|/v1/user", "app-2"}
	hashes := []func(string) uint64{
		func(k string) uint64 { return 0 },
		m.Hash,
		other.Hash,
		func(k string) uint64 { return m.Hash(k + "x") },
	}
	for i := range 10 {
		h := hashes[i%len(hashes)]
		reqs := []Request{{Key: keys[0], Params: p, Hash: h(keys[0])}, {Key: keys[1], Params: p, Hash: h(keys[1])}}
		ok, err := m.Allow(ctx, t0, reqs, res)
		if err != nil || !ok {
			t.Fatalf("call %d: %v %v", i, ok, err)
		}
		if res[0].Remaining != int64(9-i) || res[1].Remaining != int64(9-i) {
			t.Fatalf("call %d: remaining %d %d, want %d", i, res[0].Remaining, res[1].Remaining, 9-i)
		}
		ok, err = m.Allow(ctx, t0, []Request{{Key: keys[2], Params: p, Hash: h(keys[2])}}, res)
		if err != nil || !ok || res[0].Remaining != int64(9-i) {
			t.Fatalf("call %d alone: %v %v remaining %d", i, ok, err, res[0].Remaining)
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len: got %d, want 3", m.Len())
	}
	checkTables(t, m)
}
