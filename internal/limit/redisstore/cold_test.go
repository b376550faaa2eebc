package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// BenchmarkRedisCold measures decisions on cold keys, as bench/run.sh's
// cold path makes them (one limit counted by a header, a key never seen
// before on every request, with an overflow key under the key budget):
// 32 goroutines, against the memory store and the Redis store in the
// same run. It reports the gateway's CPU per decision and, for Redis,
// Redis's CPU per 1,000 decisions (INFO cpu).
func BenchmarkRedisCold(b *testing.B) {
	p := &limit.Params{Algorithm: "sliding_window", Limit: 2_000_000_000, Window: time.Second, Precision: limit.DefaultPrecision}
	var seq atomic.Int64
	srv := redistest.Start(b)
	run := func(b *testing.B, s limit.Store) {
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			res := make([]limit.Result, 1)
			reqs := make([]limit.Request, 1)
			for pb.Next() {
				k := "mix|/v1/user|" + strconv.FormatInt(seq.Add(1), 10)
				reqs[0] = limit.Request{Key: k, Tag: "mix", Params: p, Overflow: "mix|/v1/user|overflow"}
				if ok, err := s.Allow(ctx, time.Now(), reqs, res); err != nil || !ok {
					b.Errorf("Allow: %v %v", ok, err)
					return
				}
			}
		})
	}
	b.Run("memory", func(b *testing.B) {
		m, err := limit.NewMemory(limit.MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		own := ownCPU()
		run(b, m)
		b.ReportMetric(float64(ownCPU()-own)/float64(b.N)/1e3, "cpu-µs/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	// "redis" has the key budget and leases, as the gateway does; the
	// others show what the budget's bookkeeping and the leases' cost, and
	// what the decision costs as a script (EVALSHA) rather than a
	// function (FCALL), and each call sent alone (no batches: what a
	// decision costs Redis when the gateway is not busy).
	for _, tt := range []struct {
		name                   string
		maxKeys, leases, batch int
		evalsha                bool
	}{{"redis", 0, 0, 0, false}, {"redis/alone", 0, 0, 1, false}, {"redis/no-budget", -1, 0, 0, false}, {"redis/no-leases", 0, -1, 0, false}, {"redis/evalsha", 0, 0, 0, true}} {
		b.Run(tt.name, func(b *testing.B) {
			red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second, MaxKeys: tt.maxKeys, Leases: tt.leases, MaxBatch: tt.batch})
			red.fn.off = tt.evalsha
			if err := red.Ready(context.Background()); err != nil {
				b.Fatal(err)
			}
			before, cpu, own := red.Stats(), redisCPU(b, srv), ownCPU()
			run(b, red)
			b.StopTimer()
			st := red.Stats()
			n := float64(st.Decisions - before.Decisions)
			b.ReportMetric(float64(ownCPU()-own)/n/1e3, "cpu-µs/op")
			b.ReportMetric(float64(st.RoundTrips-before.RoundTrips)/n, "round-trips/op")
			b.ReportMetric((redisCPU(b, srv)-cpu)/n*1000*1e3, "redis-ms/1000ops")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
