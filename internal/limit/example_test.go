package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

func ExampleNewMemory() {
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	// app-1 may make 3 requests a second in total, 2 of them to /v1/user.
	total := limit.Params{Algorithm: "sliding_window", Limit: 3, Window: time.Second, Precision: 10}
	user := limit.Params{Algorithm: "sliding_window", Limit: 2, Window: time.Second, Precision: 10}
	reqs := []limit.Request{
		{Key: "app-1", Params: &total},
		{Key: "app-1|/v1/user", Params: &user},
	}
	res := make([]limit.Result, len(reqs))

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond, 1100 * time.Millisecond} {
		ok, err := store.Allow(context.Background(), now.Add(at), reqs, res)
		if err != nil {
			panic(err)
		}
		fmt.Printf("t+%v: allowed=%v total remaining=%d user remaining=%d retry after=%v\n",
			at, ok, res[0].Remaining, res[1].Remaining, res[1].RetryAfter)
	}
	// Output:
	// t+0s: allowed=true total remaining=2 user remaining=1 retry after=0s
	// t+300ms: allowed=true total remaining=1 user remaining=0 retry after=0s
	// t+600ms: allowed=false total remaining=1 user remaining=0 retry after=500ms
	// t+1.1s: allowed=true total remaining=1 user remaining=0 retry after=0s
}

func ExampleParams_lock() {
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	// 2 logins a minute in fixed windows; a caller that goes over is
	// locked out for 5 minutes.
	login := limit.Params{Algorithm: "fixed_window", Limit: 2, Window: time.Minute, Lock: 5 * time.Minute}
	reqs := []limit.Request{{Key: "app-1|/v1/login", Params: &login}}
	res := make([]limit.Result, 1)

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second, time.Minute, 5*time.Minute + 2*time.Second} {
		ok, err := store.Allow(context.Background(), now.Add(at), reqs, res)
		if err != nil {
			panic(err)
		}
		fmt.Printf("t+%v: allowed=%v retry after=%v\n", at, ok, res[0].RetryAfter)
	}
	// Output:
	// t+0s: allowed=true retry after=0s
	// t+1s: allowed=true retry after=0s
	// t+2s: allowed=false retry after=5m0s
	// t+1m0s: allowed=false retry after=4m2s
	// t+5m2s: allowed=true retry after=0s
}

func ExampleParams_tokenBucket() {
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		panic(err)
	}
	// 5 a second with bursts of 3: a full bucket lets 3 through at once,
	// then one every 200ms.
	p := limit.Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 3}
	reqs := []limit.Request{{Key: "app-1|/v1/order", Params: &p}}
	res := make([]limit.Result, 1)

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 200 * time.Millisecond} {
		ok, err := store.Allow(context.Background(), now.Add(at), reqs, res)
		if err != nil {
			panic(err)
		}
		fmt.Printf("t+%v: allowed=%v remaining=%d retry after=%v\n", at, ok, res[0].Remaining, res[0].RetryAfter)
	}
	// Output:
	// t+0s: allowed=true remaining=2 retry after=0s
	// t+0s: allowed=true remaining=1 retry after=0s
	// t+0s: allowed=true remaining=0 retry after=0s
	// t+0s: allowed=false remaining=0 retry after=200ms
	// t+200ms: allowed=true remaining=0 retry after=0s
}
