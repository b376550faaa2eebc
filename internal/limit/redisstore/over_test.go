package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestReadPastDenyCache reads a limit that a charge took past while the
// deny cache holds a denial of its key: the read still asks Redis, which
// alone knows how far past the limit the key is (Result.Over).
func TestReadPastDenyCache(t *testing.T) {
	t.Parallel()
	r := newTestRedis(t, Config{URL: redistest.Start(t).URL(), Timeout: 10 * time.Second})
	p := limit.Params{Algorithm: "token_bucket", Limit: 10, Window: time.Hour}
	ctx, now := context.Background(), time.Now()
	do := func(act limit.Act, cost int64) (bool, limit.Result) {
		t.Helper()
		res := make([]limit.Result, 1)
		ok, err := r.Allow(ctx, now, []limit.Request{{Key: "app|/chat", Params: &p, Act: act, Cost: cost}}, res)
		if err != nil {
			t.Fatalf("%s of %d: %v", act, cost, err)
		}
		return ok, res[0]
	}
	do(limit.Charge, 12)
	if ok, res := do(limit.Take, 1); ok {
		t.Fatalf("a take on a limit charged 12 of 10: admitted %+v", res)
	}
	calls := r.Stats().Calls
	if ok, _ := do(limit.Take, 1); ok || r.Stats().Calls != calls {
		t.Fatalf("a second take: admitted %v after %d calls, want denied by the deny cache without a call", ok, r.Stats().Calls-calls)
	}
	ok, res := do(limit.Read, 0)
	if !ok || res.Over != 2 || res.Remaining != 0 || r.Stats().Calls != calls+1 {
		t.Errorf("a read: got %v %+v after %d calls, want true, over 2, remaining 0, from one call to Redis", ok, res, r.Stats().Calls-calls)
	}
}
