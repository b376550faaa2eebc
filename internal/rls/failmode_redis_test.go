package rls

import (
	"context"
	"log/slog"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// TestFailLocalRedisSlowCostsOnce stalls Redis (SIGSTOP, then SIGCONT)
// under a service in fail mode local whose local share admits every
// call, as TestRedisSlowCostsOnce does under the Redis store alone.
// Afterwards Redis has counted every admitted call exactly once: the call
// in flight when Redis stopped ran when it woke and is not counted again,
// and those that never reached it were written back, because the service
// tells the store of each local admission.
func TestFailLocalRedisSlowCostsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A test's timeout: a loaded machine may make a call time out outside
	// the stall too, which changes nothing here. No leases, so that every
	// admission Redis counts is a call's.
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 300 * time.Millisecond, DialTimeout: 10 * time.Second, Leases: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	mem, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := observe.NewRLSMetrics(reg)
	svc, err := New(Config{Store: red, FailMode: failmode.Local, Local: mem, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// A year's fixed window: the test does not cross into the next.
	rules, err := rlsconfig.Parse("slow.yaml", []byte(`domain: slow
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 100000, algorithm: fixed_window}
`), rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(rules)
	req := &rlsv3.RateLimitRequest{Domain: "slow", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}}
	admitted := 0
	// call reports whether the store decided the call.
	call := func() bool {
		before := metricValue(t, reg, "gateway_rls_store_errors_total")
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit: got %v, want OK (the limit is far off)", resp.OverallCode)
		}
		admitted++
		return metricValue(t, reg, "gateway_rls_store_errors_total") == before
	}
	for range 10 {
		if !call() {
			t.Fatal("with Redis up, the store failed a call")
		}
	}
	srv.Pause()
	// Until the breaker opens, and some more while it is open.
	for i := 0; i < 20 || !red.CircuitOpen(); i++ {
		call()
	}
	srv.Resume()
	// Until Redis decides again (the breaker's probe).
	eventually.True(t, 30*time.Second, call, "Redis did not decide again within 30s of its return")
	for range 10 {
		call()
	}
	if err := red.Close(); err != nil {
		t.Fatal(err)
	}
	st := red.Stats()
	keys, err := srv.Client().Keys(ctx, "gw:{"+tagPrefix+"slow}|*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("Redis holds counters %q, want one", keys)
	}
	counted, err := redistest.FieldInt(ctx, srv.Client(), keys[0], "c")
	if err != nil {
		t.Fatal(err)
	}
	local := int(metricValue(t, reg, "gateway_rls_store_errors_total"))
	t.Logf("admitted %d, %d of them locally; Redis counted %d; %+v", admitted, local, counted, st)
	if local == 0 || st.WrittenBack == 0 {
		t.Errorf("the test admitted nothing locally, or wrote nothing back: %d local, %d written back", local, st.WrittenBack)
	}
	if counted != admitted {
		t.Errorf("Redis counted %d, want the %d admitted, each once", counted, admitted)
	}
}

// TestFailLocalCallerGoneAnswers stalls Redis under a call whose caller
// gives up before the store's timeout: the call is decided locally, and
// counted, so it gets that answer, not the caller's cancellation as a gRPC
// error for a call that was counted all the same.
func TestFailLocalCallerGoneAnswers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second, DialTimeout: 10 * time.Second, Leases: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	if err := red.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Store: red, FailMode: failmode.Local, Local: mem, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rlsconfig.Parse("gone.yaml", []byte(`domain: gone
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
`), rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(rules)
	req := &rlsv3.RateLimitRequest{Domain: "gone", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}}
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	resp, err := svc.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("a call decided and counted locally: got error %v, want its answer", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("got %v, want OK", resp.OverallCode)
	}
}
