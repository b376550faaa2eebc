package limit

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchParams never deny at one request per µs of fake time per goroutine.
var benchParams = swParams(MaxLimit, time.Second, DefaultPrecision)

func BenchmarkSlidingWindow(b *testing.B) {
	for _, tt := range []struct {
		name      string
		limit     int64
		precision int
	}{
		{name: "allow/precision=10", limit: MaxLimit, precision: 10},
		{name: "allow/precision=1000", limit: MaxLimit, precision: 1000},
		{name: "deny/precision=10", limit: 1, precision: 10},
		{name: "deny/precision=1000", limit: 1, precision: 1000},
	} {
		b.Run(tt.name, func(b *testing.B) {
			p := swParams(tt.limit, time.Second, tt.precision)
			st := slidingWindow{}.NewState(p)
			now := t0.UnixNano()
			st.Commit(now, p, 1)
			b.ReportAllocs()
			for b.Loop() {
				now += int64(time.Microsecond)
				if st.Decide(now, p, 1).Allowed {
					st.Commit(now, p, 1)
				}
			}
		})
	}
}

// BenchmarkMemoryAllow is one decision on an existing key.
func BenchmarkMemoryAllow(b *testing.B) {
	for _, tt := range []struct {
		name string
		reqs []Request
	}{
		{name: "one limit", reqs: []Request{{Key: "app-1|/v1/user", Params: benchParams}}},
		{name: "one limit denied", reqs: []Request{{Key: "app-1|/v1/user", Params: swParams(1, time.Second, 10)}}},
		{
			name: "app total and API",
			reqs: []Request{
				{Key: "app-1", Params: benchParams},
				{Key: "app-1|/v1/user", Params: benchParams},
			},
		},
	} {
		b.Run(tt.name, func(b *testing.B) {
			m := newTestMemory(b, MemoryConfig{})
			ctx := context.Background()
			res := make([]Result, len(tt.reqs))
			now := t0
			if _, err := m.Allow(ctx, now, tt.reqs, res); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				m.Allow(ctx, now, tt.reqs, res)
			}
		})
	}
}

// BenchmarkMemoryAllowParallel decides from GOMAXPROCS goroutines, on one
// shared key (contention on one shard) and on many keys spread over the
// shards.
func BenchmarkMemoryAllowParallel(b *testing.B) {
	const distinct = 10_000
	keys, totals := make([]string, distinct), make([]string, distinct)
	for i := range keys {
		keys[i] = fmt.Sprintf("app-%d|/v1/user", i)
		totals[i] = fmt.Sprintf("app-%d", i)
	}
	for _, tt := range []struct {
		name      string
		keys      []string
		two       bool
		perWorker bool
	}{
		{name: "shared key", keys: keys[:1]},
		// One hot key per goroutine: the parallel counterpart of
		// BenchmarkMemoryAllow/one_limit, for the scaling ratio.
		{name: "key per goroutine", keys: keys[:64], perWorker: true},
		{name: "distinct keys", keys: keys},
		{name: "app total and API/distinct apps", keys: keys, two: true},
	} {
		b.Run(tt.name, func(b *testing.B) {
			m := newTestMemory(b, MemoryConfig{})
			ctx := context.Background()
			if tt.perWorker {
				// Keys in distinct shards: the seed is random, and two
				// workers' keys sharing a shard (and its lock) would
				// measure contention, not scaling.
				tt.keys = keysInDistinctShards(m, keys, len(tt.keys))
			}
			for i, k := range tt.keys {
				if _, err := m.Allow(ctx, t0, []Request{{Key: k, Params: benchParams}, {Key: totals[i], Params: benchParams}}, make([]Result, 2)); err != nil {
					b.Fatal(err)
				}
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				reqs := make([]Request, 1, 2)
				if tt.two {
					reqs = reqs[:2]
				}
				res := make([]Result, 2)
				now := t0
				w := i
				for pb.Next() {
					i = (i + 1) % len(tt.keys)
					if tt.perWorker {
						i = w % len(tt.keys)
					}
					reqs[0] = Request{Key: tt.keys[i], Params: benchParams}
					if tt.two {
						reqs[1] = Request{Key: totals[i], Params: benchParams}
					}
					now = now.Add(time.Microsecond)
					m.Allow(ctx, now, reqs, res)
				}
			})
		})
	}
}

// keysInDistinctShards returns up to n of keys, no two of them in the same
// shard of m.
func keysInDistinctShards(m *Memory, keys []string, n int) []string {
	var picked []string
	seen := map[uint32]bool{}
	for _, k := range keys {
		if s := m.shardOf(m.hash(k)); !seen[s] {
			seen[s] = true
			picked = append(picked, k)
			if len(picked) == n {
				break
			}
		}
	}
	return picked
}

// BenchmarkMemoryBytesPerKey reports the heap held per sliding_window key
// (precision 10) in a store of a million keys. Run it with -benchtime=1x.
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	const keys = 1_000_000
	perKey := measureBytesPerKey(b, keys, swParams(100, time.Minute, 10))
	b.ReportMetric(perKey, "bytes/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/insert")
}

// measureBytesPerKey fills a fresh store with n client-IP keys under p, b.N
// times, and returns the heap it holds per key.
func measureBytesPerKey(b *testing.B, n int, p *Params) float64 {
	b.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("*|/v1/user|10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff)
	}
	ctx := context.Background()
	reqs, res := make([]Request, 1), make([]Result, 1)
	var perKey float64
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()

		m := newTestMemory(b, MemoryConfig{MaxKeys: n})
		for _, k := range names {
			reqs[0] = Request{Key: k, Params: p}
			if _, err := m.Allow(ctx, t0, reqs, res); err != nil {
				b.Fatal(err)
			}
		}

		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if m.Len() != n {
			b.Fatalf("Len: got %d, want %d", m.Len(), n)
		}
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
		runtime.KeepAlive(m)
		b.StartTimer()
	}
	return perKey
}

// algCase is an algorithm and its Params in a benchmark.
type algCase struct {
	name string
	p    *Params
}

// algCases returns Params of every algorithm with the given limit per
// second, and of token_bucket also with a warm-up.
func algCases(limit int64) []algCase {
	var cs []algCase
	for _, name := range Algorithms() {
		p := &Params{Algorithm: name, Limit: limit, Window: time.Second}
		a, _ := Lookup(name)
		if a.Reads()&SettingPrecision != 0 {
			p.Precision = DefaultPrecision
		}
		cs = append(cs, algCase{name: name, p: p})
		if a.Reads()&SettingWarmup != 0 {
			w := *p
			w.Warmup = time.Second
			cs = append(cs, algCase{name: name + "+warmup", p: &w})
		}
	}
	return cs
}

// BenchmarkAlgorithms is one decision of each algorithm's State, without
// a store: admitted (a limit that is never reached at one request per µs)
// and denied (a limit of 100 per second, long reached).
func BenchmarkAlgorithms(b *testing.B) {
	for _, tt := range []struct {
		name  string
		limit int64
	}{
		{name: "allow", limit: 10_000_000},
		{name: "deny", limit: 100},
	} {
		for _, c := range algCases(tt.limit) {
			p := c.p
			if p.Algorithm == "sliding_log" && p.Limit > MaxLogLimit {
				p.Limit = MaxLogLimit
				p.Window = 10 * time.Millisecond // still never reached
			}
			b.Run(c.name+"/"+tt.name, func(b *testing.B) {
				st := newState(b, p)
				now := t0.UnixNano()
				for range 200 {
					if st.Decide(now, p, 1).Allowed {
						st.Commit(now, p, 1)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					now += int64(time.Microsecond)
					if st.Decide(now, p, 1).Allowed {
						st.Commit(now, p, 1)
					}
				}
			})
		}
	}
}

// BenchmarkMemoryAllowAlgorithms is one decision on an existing key of
// each algorithm through the memory store, with the app total and the
// API rule of a request.
func BenchmarkMemoryAllowAlgorithms(b *testing.B) {
	for _, c := range algCases(MaxLogLimit) {
		p := c.p
		b.Run(c.name, func(b *testing.B) {
			m := newTestMemory(b, MemoryConfig{})
			ctx := context.Background()
			reqs := []Request{{Key: "app-1", Params: p}, {Key: "app-1|/v1/user", Params: p}}
			res := make([]Result, len(reqs))
			now := t0
			if _, err := m.Allow(ctx, now, reqs, res); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				m.Allow(ctx, now, reqs, res)
			}
		})
	}
}

// BenchmarkMemoryAllowParallelAlgorithms decides from GOMAXPROCS
// goroutines on keys spread over the shards, for each algorithm.
func BenchmarkMemoryAllowParallelAlgorithms(b *testing.B) {
	const distinct = 10_000
	keys := make([]string, distinct)
	for i := range keys {
		keys[i] = fmt.Sprintf("app-%d|/v1/user", i)
	}
	for _, c := range algCases(MaxLogLimit) {
		p := c.p
		b.Run(c.name, func(b *testing.B) {
			m := newTestMemory(b, MemoryConfig{})
			ctx := context.Background()
			for _, k := range keys {
				if _, err := m.Allow(ctx, t0, []Request{{Key: k, Params: p}}, make([]Result, 1)); err != nil {
					b.Fatal(err)
				}
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				reqs, res := make([]Request, 1), make([]Result, 1)
				now := t0
				for pb.Next() {
					i = (i + 1) % len(keys)
					reqs[0] = Request{Key: keys[i], Params: p}
					now = now.Add(time.Microsecond)
					m.Allow(ctx, now, reqs, res)
				}
			})
		})
	}
}

// BenchmarkMemoryBytesPerKeyAlgorithms reports the heap held per key of
// each algorithm, for a limit of 100 per minute, in a store of 100,000
// keys that each counted one request. Run it with -benchtime=1x.
func BenchmarkMemoryBytesPerKeyAlgorithms(b *testing.B) {
	for _, c := range algCases(100) {
		p := c.p
		p.Window = time.Minute
		b.Run(c.name, func(b *testing.B) {
			b.ReportMetric(measureBytesPerKey(b, 100_000, p), "bytes/key")
		})
	}
}
