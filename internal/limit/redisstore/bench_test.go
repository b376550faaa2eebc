package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// BenchmarkRedisAllow measures decisions per second against a local Redis,
// one goroutine and many, for one limit and for an app total with a rule.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	p := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: time.Second, Precision: limit.DefaultPrecision}
	for _, tt := range []struct {
		name string
		reqs []limit.Request
	}{
		{name: "one limit", reqs: []limit.Request{{Key: "bench|/v1/user", Params: p}}},
		{name: "app total and API", reqs: []limit.Request{{Key: "bench|", Params: p}, {Key: "bench|/v1/user", Params: p}}},
	} {
		red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second})
		ctx := context.Background()
		b.Run(tt.name+"/serial", func(b *testing.B) {
			res := make([]limit.Result, len(tt.reqs))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := red.Allow(ctx, time.Time{}, tt.reqs, res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(tt.name+"/parallel", func(b *testing.B) {
			before := red.Stats()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				res := make([]limit.Result, len(tt.reqs))
				for pb.Next() {
					if _, err := red.Allow(ctx, time.Time{}, tt.reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			// The script calls per decision: a lease's, the next lease's,
			// and those of requests that found no token.
			b.ReportMetric(float64(red.Stats().Calls-before.Calls)/float64(b.N), "calls/decision")
		})
	}
}

// BenchmarkRedisAlgorithms measures decisions per second of each
// algorithm's script against a local Redis, from 8 goroutines, at the
// largest limit every algorithm takes (sliding_log's MaxLogLimit) per
// second: a mix of admitted and denied decisions.
func BenchmarkRedisAlgorithms(b *testing.B) {
	srv := redistest.Start(b)
	// No deny cache: every decision is a script call.
	red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second, DenyCacheSize: -1})
	ctx := context.Background()
	for _, c := range algCases(limit.MaxLogLimit) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				reqs := []limit.Request{{Key: "bench|/" + c.name, Params: c.p}}
				res := make([]limit.Result, 1)
				for pb.Next() {
					if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkRedisDenied measures a caller that keeps asking while denied,
// with the deny cache and without: the Redis calls per denied request.
func BenchmarkRedisDenied(b *testing.B) {
	srv := redistest.Start(b)
	p := &limit.Params{Algorithm: "sliding_window", Limit: 1, Window: time.Hour, Precision: limit.DefaultPrecision}
	for _, tt := range []struct {
		name string
		size int
	}{
		{name: "deny cache", size: 0},
		{name: "no deny cache", size: -1},
	} {
		b.Run(tt.name, func(b *testing.B) {
			red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second, DenyCacheSize: tt.size})
			ctx := context.Background()
			reqs := []limit.Request{{Key: "denied|/" + tt.name, Params: p}}
			res := make([]limit.Result, 1)
			red.Allow(ctx, time.Time{}, reqs, res)
			calls := redistest.ScriptCalls(b, srv.Client())
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]limit.Result, 1)
				for pb.Next() {
					if ok, err := red.Allow(ctx, time.Time{}, reqs, res); ok || err != nil {
						b.Errorf("got %v %v, want denied", ok, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(redistest.ScriptCalls(b, srv.Client())-calls)/float64(b.N), "redis-calls/op")
		})
	}
}
