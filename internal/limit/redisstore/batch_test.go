package redisstore

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// queued returns the number of calls waiting in the batcher of red's one
// node.
func queued(red *Store) int {
	q := red.batcherFor(red.nodes.single)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// stalled starts a call on red while srv is paused, so that the calls
// made after it queue behind it, and returns a wait for its result.
func stalled(t *testing.T, srv *redistest.Server, red *Store, reqs []limit.Request) func() (bool, error) {
	t.Helper()
	srv.Pause()
	t.Cleanup(srv.Resume)
	var ok bool
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ok, err = red.Allow(context.Background(), time.Time{}, reqs, make([]limit.Result, len(reqs)))
	}()
	q := red.batcherFor(red.nodes.single)
	eventually.True(t, 10*time.Second, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.busy
	}, "the first call is not in flight")
	return func() (bool, error) { <-done; return ok, err }
}

// TestRedisBatch checks that calls made while one is in flight go to
// Redis together, in one round trip, in the order they came, and that
// each is decided as it would be alone: exactly the limit is admitted,
// and the admitted ones are the first.
func TestRedisBatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var sizes []int
	var mu sync.Mutex
	// No leases: every call is a script call.
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, DenyCacheSize: -1, Leases: -1,
		OnBatch: func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }})
	redistest.Ready(t, red)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 5, Window: quietWindow(time.Hour)}
	reqs := []limit.Request{{Key: "batch|/", Params: p}}
	before := red.Stats()
	first := stalled(t, srv, red, reqs)

	const queuedCalls = 10
	allowed := make([]bool, queuedCalls)
	var wg sync.WaitGroup
	for i := range queuedCalls {
		// One at a time, so that the queue's order is i's.
		wg.Go(func() {
			ok, err := red.Allow(context.Background(), time.Time{}, reqs, make([]limit.Result, 1))
			if err != nil {
				t.Errorf("queued call %d: %v", i, err)
			}
			allowed[i] = ok
		})
		eventually.True(t, 10*time.Second, func() bool { return queued(red) == i+1 }, "call %d did not queue", i)
	}
	srv.Resume()
	if ok, err := first(); !ok || err != nil {
		t.Fatalf("the first call: %v %v, want admitted", ok, err)
	}
	wg.Wait()
	want := []bool{true, true, true, true, false, false, false, false, false, false}
	if fmt.Sprint(allowed) != fmt.Sprint(want) {
		t.Errorf("queued calls admitted: got %v, want %v (the first four of the limit's five left)", allowed, want)
	}
	st := red.Stats()
	if calls, trips := st.Calls-before.Calls, st.RoundTrips-before.RoundTrips; calls != 1+queuedCalls || trips != 2 {
		t.Errorf("script calls and round trips: got %d and %d, want %d and 2", calls, trips, 1+queuedCalls)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sizes) != fmt.Sprint([]int{queuedCalls}) {
		t.Errorf("batch sizes: got %v, want [%d]", sizes, queuedCalls)
	}
}

// TestRedisBatchLeft checks that a queued call whose caller went away is
// not sent, and that the others still are.
func TestRedisBatchLeft(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, DenyCacheSize: -1, Leases: -1})
	redistest.Ready(t, red)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: quietWindow(time.Hour)}
	reqs := []limit.Request{{Key: "left|/", Params: p}}
	before := red.Stats()
	first := stalled(t, srv, red, reqs)

	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() {
		_, err := red.Allow(ctx, time.Time{}, reqs, make([]limit.Result, 1))
		gone <- err
	}()
	eventually.True(t, 10*time.Second, func() bool { return queued(red) == 1 }, "the call did not queue")
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := red.Allow(context.Background(), time.Time{}, reqs, make([]limit.Result, 1)); !ok || err != nil {
			t.Errorf("the call that stayed: %v %v, want admitted", ok, err)
		}
	})
	eventually.True(t, 10*time.Second, func() bool { return queued(red) == 2 }, "the second call did not queue")
	cancel()
	if err := <-gone; err == nil {
		t.Error("the call whose caller left: got no error")
	}
	srv.Resume()
	if _, err := first(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if calls := red.Stats().Calls - before.Calls; calls != 2 {
		t.Errorf("script calls: got %d, want 2 (the left call is not sent)", calls)
	}
	res := make([]limit.Result, 1)
	if _, err := red.Allow(context.Background(), time.Time{}, reqs, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 100-3 {
		t.Errorf("remaining after the first, the one that stayed and this one: got %d, want %d", res[0].Remaining, 100-3)
	}
}

// TestRedisBatchFailsOnce checks that a round trip that fails is one
// failure for the node's breaker, however many calls it carried.
func TestRedisBatchFailsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DenyCacheSize: -1, BreakerThreshold: 3, Leases: -1})
	redistest.Ready(t, red)
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Hour}
	reqs := []limit.Request{{Key: "fails|/", Params: p}}
	first := stalled(t, srv, red, reqs)
	const queuedCalls = 8
	var wg sync.WaitGroup
	for i := range queuedCalls {
		wg.Go(func() {
			if _, err := red.Allow(context.Background(), time.Time{}, reqs, make([]limit.Result, 1)); err == nil {
				t.Errorf("queued call %d to a stopped Redis: got no error", i)
			}
		})
		eventually.True(t, 10*time.Second, func() bool { return queued(red) == i+1 }, "call %d did not queue", i)
	}
	if _, err := first(); err == nil {
		t.Error("the first call to a stopped Redis: got no error")
	}
	wg.Wait()
	if red.CircuitOpen() {
		t.Errorf("the breaker opened after two failed round trips (threshold 3): a batch counted once per call")
	}
}

// BenchmarkRedisBatch measures 32 goroutines deciding on one Redis, each
// call alone (MaxBatch 1, as many round trips at once as connections)
// and batched: the round trips per decision, and Redis's CPU time per
// 1,000 decisions (from INFO cpu).
func BenchmarkRedisBatch(b *testing.B) {
	srv := redistest.Start(b)
	p := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: time.Second, Precision: limit.DefaultPrecision}
	for _, tt := range []struct {
		name string
		max  int
	}{{"alone", 1}, {"batched", 0}} {
		b.Run(tt.name, func(b *testing.B) {
			red := newTestRedis(b, Config{URL: srv.URL(), Timeout: time.Second, MaxBatch: tt.max, Leases: -1})
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				b.Fatal(err)
			}
			before, cpu, own := red.Stats(), redisCPU(b, srv), ownCPU()
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				res := make([]limit.Result, 2)
				for i := 0; pb.Next(); i++ {
					reqs := []limit.Request{{Key: "bench|", Params: p}, {Key: fmt.Sprintf("bench|/%d", i%16), Params: p}}
					if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			st := red.Stats()
			n := float64(st.Decisions - before.Decisions)
			b.ReportMetric(float64(ownCPU()-own)/n/1e3, "cpu-µs/op")
			b.ReportMetric(float64(st.RoundTrips-before.RoundTrips)/n, "round-trips/op")
			b.ReportMetric((redisCPU(b, srv)-cpu)/n*1000*1e6, "redis-µs/1000ops")
		})
	}
}

// ownCPU returns the CPU time this process has used.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the CPU time, in seconds, that srv has used.
func redisCPU(tb testing.TB, srv *redistest.Server) float64 {
	info := srv.Info("cpu")
	var total float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		var v float64
		if _, err := fmt.Sscan(info[k], &v); err != nil {
			tb.Fatalf("INFO cpu %s: %q: %v", k, info[k], err)
		}
		total += v
	}
	return total
}
