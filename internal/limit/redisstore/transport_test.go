package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisNoScript checks that the store survives Redis losing its script
// cache and its function library (SCRIPT FLUSH, FUNCTION FLUSH, a
// restart): EVALSHA fails with NOSCRIPT, or FCALL with "Function not
// found", and the store falls back to EVAL.
func TestRedisNoScript(t *testing.T) {
	t.Parallel()
	for _, functions := range []bool{true, false} {
		t.Run(fmt.Sprintf("functions=%v", functions), func(t *testing.T) {
			t.Parallel()
			testRedisNoScript(t, functions)
		})
	}
}

func testRedisNoScript(t *testing.T, functions bool) {
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
	red.fn.off = !functions
	ctx := context.Background()
	redistest.Ready(t, red)
	if got := red.fn.on.Load(); got != functions {
		t.Fatalf("FCALL in use after Ready: got %v, want %v", got, functions)
	}
	p := &limit.Params{Algorithm: "sliding_log", Limit: 3, Window: time.Hour}
	res := make([]limit.Result, 1)
	for i, want := range []bool{true, true, true, false} {
		if i == 2 {
			if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Client().FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: "noscript|/", Params: p}}, res)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got != want {
			t.Errorf("call %d: allowed: got %v, want %v", i, got, want)
		}
	}
	// Ready loaded the script: only the call after the flush needs EVAL.
	stats := srv.Info("commandstats")
	if calls := stats["cmdstat_eval"]; !strings.Contains(calls, "calls=1,") {
		t.Errorf("EVAL stats: got %q, want 1 call (the one after the flush)", calls)
	}
	// The other calls are FCALL with the library, EVALSHA without (Ready
	// checks the library with one FCALL of its own).
	want, none := "cmdstat_fcall", "cmdstat_evalsha"
	if !functions {
		want, none = none, want
	}
	if calls := stats[want]; calls == "" {
		t.Errorf("%s: no calls", want)
	}
	// With the library, the calls after the flush may be EVALSHA until
	// the background warm-up has loaded it again.
	if calls := stats[none]; !functions && calls != "" {
		t.Errorf("%s: got %q, want no calls", none, calls)
	}
}

// TestRedisSlowIsATimeout checks that a Redis that answers slowly fails
// the call after the timeout rather than holding it.
func TestRedisSlowIsATimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A test's timeout, not the production 25ms: well above what a
	// loaded machine takes to answer, well below the 5s sleep.
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Hour}
	reqs := []limit.Request{{Key: "slow|/", Params: p}}
	res := make([]limit.Result, 1)
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
		t.Fatal(err)
	}
	sleeping := make(chan error, 1)
	go func() { sleeping <- srv.Client().Do(ctx, "DEBUG", "SLEEP", "5").Err() }()
	// Wait until the server is asleep: a PING of another client hangs.
	eventually.True(t, 10*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return red.client.Ping(pctx).Err() != nil
	}, "Redis did not go to sleep")
	start := time.Now()
	_, err := red.Allow(ctx, time.Time{}, reqs, res)
	took := time.Since(start)
	var nerr net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &nerr) && nerr.Timeout()) {
		t.Errorf("Allow while Redis sleeps: got %v, want a timeout", err)
	}
	// A timeout error is the proof it did not wait for Redis, which
	// would have answered after its sleep.
	t.Logf("Allow while Redis sleeps returned after %v", took)
	if err := <-sleeping; err != nil {
		t.Fatal(err)
	}
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
		t.Errorf("Allow after Redis woke up: %v", err)
	}
}

// TestRedisDownAtStart checks that the store can be created while Redis
// is down, fails its calls, opens its breaker, and uses Redis by itself
// once it comes.
func TestRedisDownAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	var opened, closed atomic.Int32
	// Not the default 25ms timeout: after the restart, a call that times
	// out on a loaded machine would open the breaker again.
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, OnCircuitChange: func(open bool) {
		if open {
			opened.Add(1)
		} else {
			closed.Add(1)
		}
	}})
	ctx := context.Background()
	p := &limit.Params{Algorithm: "token_bucket", Limit: 100, Window: time.Hour}
	reqs := []limit.Request{{Key: "down|/", Params: p}}
	res := make([]limit.Result, 1)
	for range DefaultBreakerThreshold {
		if _, err := red.Allow(ctx, time.Time{}, reqs, res); err == nil || errors.Is(err, limit.ErrCircuitOpen) {
			t.Fatalf("Allow with Redis down: got %v, want a connection error", err)
		}
	}
	if _, err := red.Allow(ctx, time.Time{}, reqs, res); !errors.Is(err, limit.ErrCircuitOpen) {
		t.Fatalf("Allow after %d failures: got %v, want ErrCircuitOpen", DefaultBreakerThreshold, err)
	}
	if !red.CircuitOpen() || opened.Load() != 1 {
		t.Errorf("breaker: open %v after %d opens, want open after 1", red.CircuitOpen(), opened.Load())
	}
	if _, err := red.Ping(ctx); err == nil {
		t.Errorf("Ping with Redis down: got nil")
	}

	srv.Restart()
	eventually.True(t, 10*time.Second, func() bool {
		_, err := red.Allow(ctx, time.Time{}, reqs, res)
		return err == nil
	}, "Allow never succeeded after Redis came back")
	if red.CircuitOpen() || closed.Load() != 1 {
		t.Errorf("breaker: open %v after %d closes, want closed after 1", red.CircuitOpen(), closed.Load())
	}
	if _, err := red.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestRedisCluster checks the store on a three-node Redis Cluster: the keys
// of many apps spread over the nodes' slots, each request's keys share its
// app's slot, and every limit holds.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	red := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 2 * time.Second})
	ctx := context.Background()
	total := &limit.Params{Algorithm: "sliding_window", Limit: 5, Window: time.Hour, Precision: 10}
	rule := &limit.Params{Algorithm: "token_bucket", Limit: 3, Window: time.Hour}
	other := &limit.Params{Algorithm: "sliding_log", Limit: 10, Window: time.Hour}
	res := make([]limit.Result, 2)
	const apps = 24
	for a := range apps {
		app := fmt.Sprintf("app-%d", a)
		admitted := 0
		for range 6 {
			ok, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: app + "|", Params: total}, {Key: app + "|/rule", Params: rule}}, res)
			if err != nil {
				t.Fatalf("%s: %v", app, err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%s /rule: admitted %d, want 3", app, admitted)
		}
		admitted = 0
		for range 6 {
			ok, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: app + "|", Params: total}, {Key: app + "|/other", Params: other}}, res)
			if err != nil {
				t.Fatalf("%s: %v", app, err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != 2 {
			t.Errorf("%s /other: admitted %d, want the 2 left of the total", app, admitted)
		}
	}
	spread := 0
	for _, n := range cl.Nodes {
		if size, err := n.Client().DBSize(ctx).Result(); err == nil && size > 0 {
			spread++
		}
	}
	if spread < 2 {
		t.Errorf("keys on %d of 3 nodes, want them spread", spread)
	}
}

// TestRedisSentinel checks the store behind Redis Sentinel: it asks the
// Sentinel for the master and limits there.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "gw-master")
	red := newTestRedis(t, Config{Addrs: []string{sentinel.Addr}, SentinelMaster: "gw-master", Timeout: 2 * time.Second})
	p := &limit.Params{Algorithm: "sliding_window", Limit: 3, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 1)
	admitted := 0
	for range 5 {
		ok, err := red.Allow(context.Background(), time.Time{}, []limit.Request{{Key: "sentinel|/", Params: p}}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted through Sentinel: got %d, want 3", admitted)
	}
	if n, err := master.Client().Exists(context.Background(), "gw:{sentinel}:/").Result(); err != nil || n != 1 {
		t.Errorf("the master's key: got %d %v, want it there", n, err)
	}
}
