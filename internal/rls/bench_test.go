package rls

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// newBenchService is a Service on the memory store with the examples and
// the extension domain of the tests, and metrics.
func newBenchService(tb testing.TB, observers ...Observer) *Service {
	tb.Helper()
	mem, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := New(Config{Store: mem, Metrics: observe.NewRLSMetrics(prometheus.NewRegistry()), Logger: slog.New(slog.DiscardHandler), Observers: observers})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := rlsconfig.Parse("ext.yaml", []byte(extConfig), rlsconfig.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	svc.SetConfig(c)
	return svc
}

// BenchmarkShouldRateLimit is one decision of one descriptor, without
// gRPC: what the service adds to the store.
func BenchmarkShouldRateLimit(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchShouldRateLimit(b, newBenchService(b)) })
	// As `gateway rls` runs: top talkers always, the access log when
	// asked (here to io.Discard, the cost of the line without the disk).
	b.Run("top", func(b *testing.B) { benchShouldRateLimit(b, newBenchService(b, NewTop(observe.TopConfig{}))) })
	b.Run("top+accesslog", func(b *testing.B) {
		benchShouldRateLimit(b, newBenchService(b, NewTop(observe.TopConfig{}), NewAccessLog(observe.NewAccessLog(io.Discard, nil))))
	})
}

func benchShouldRateLimit(b *testing.B, svc *Service) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := &rlsv3.RateLimitRequest{Domain: "ext", Descriptors: []*rlv3.RateLimitDescriptor{{
				Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "detailed", Value: strconv.Itoa(i % 1000)}},
			}}}
			if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzShouldRateLimit sends arbitrary requests: never a panic, and an
// answer or an InvalidArgument error.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("ext", "cost", "1", uint32(0), uint64(1), false)
	f.Add("ext", "pair", "a", uint32(7), uint64(0), true)
	f.Add("", "k", "", uint32(1<<31), uint64(1<<63), false)
	svc := newBenchService(f)
	f.Fuzz(func(t *testing.T, domain, key, value string, hits uint32, own uint64, useOwn bool) {
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
		if useOwn {
			d.HitsAddend = wrapperspb.UInt64(own)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d, d}, HitsAddend: hits})
		if err == nil && len(resp.Statuses) != 2 {
			t.Fatalf("got %d statuses for 2 descriptors", len(resp.Statuses))
		}
	})
}
