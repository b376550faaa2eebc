package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisSlowCostsOnce stalls Redis (SIGSTOP, then SIGCONT) while
// requests come, one after the other, and admits locally every request
// Redis did not decide, as --fail-mode local does with a share that
// admits them all. Afterwards Redis has counted every admitted request
// exactly once: the call in flight when Redis stopped ran when it woke
// and is not counted again; the calls that never reached it (queued, or
// refused by the open breaker) are written back once it answers.
func TestRedisSlowCostsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, batch := range []int{0, 1} {
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			// A test's timeout: a loaded machine may make a call time out
			// outside the stall too, which changes nothing here.
			red, err := New(Config{URL: srv.URL(), Timeout: 300 * time.Millisecond, DialTimeout: 10 * time.Second,
				Leases: -1, MaxBatch: batch})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			p := &limit.Params{Algorithm: "fixed_window", Limit: 100000, Window: 1000 * time.Hour}
			key := "slow-" + strconv.Itoa(batch) + "|/"
			reqs := []limit.Request{{Key: key, Params: p}}
			res := make([]limit.Result, 1)
			admitted, local, late := 0, 0, 0
			allow := func() error {
				ok, err := red.Allow(ctx, time.Time{}, reqs, res)
				switch {
				case err == nil && ok:
					admitted++
				case err != nil:
					admitted++
					local++
					if errors.Is(err, errCallTimeout) {
						late++
					}
					limit.AdmittedLocally(err)
				}
				return err
			}
			for range 10 {
				if err := allow(); err != nil {
					t.Fatalf("with Redis up: %v", err)
				}
			}
			srv.Pause()
			// Until the breaker opens, and some more while it is open.
			for i := 0; i < 20 || !red.CircuitOpen(); i++ {
				allow()
			}
			srv.Resume()
			// Until Redis decides again (the breaker's probe).
			eventually.True(t, 30*time.Second, func() bool { return allow() == nil },
				"Redis did not decide again within 30s of its return")
			for range 10 {
				allow()
			}
			if err := red.Close(); err != nil {
				t.Fatal(err)
			}
			st := red.Stats()
			counted, err := srv.Client().HGet(ctx, "gw:{slow-"+strconv.Itoa(batch)+"}:/", "c").Int()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("admitted %d, %d of them locally (%d timed out in flight); Redis counted %d; %+v", admitted, local, late, counted, st)
			if late == 0 || local == late {
				t.Errorf("the test stalled no call in flight, or none waited: %d local, %d in flight", local, late)
			}
			if counted != admitted {
				t.Errorf("Redis counted %d, want the %d admitted, each once", counted, admitted)
			}
		})
	}
}
