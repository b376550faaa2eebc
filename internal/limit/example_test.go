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
