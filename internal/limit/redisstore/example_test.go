package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
)

// A Redis store shared by every gateway of a fleet. The example has no
// output: it needs a Redis server on 127.0.0.1:6379.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Config{
		URL:             "redis://127.0.0.1:6379/0",
		Timeout:         25 * time.Millisecond,
		OnCircuitChange: func(open bool) { log.Printf("redis circuit breaker open: %v", open) },
	})
	if err != nil {
		panic(err) // a malformed configuration; New does not connect
	}
	defer store.Close()

	// app-1's total and its /v1/user rule, decided and counted together
	// in one script call; the keys share app-1's hash tag.
	total := limit.Params{Algorithm: "sliding_window", Limit: 1000, Window: time.Minute, Precision: 10}
	user := limit.Params{Algorithm: "token_bucket", Limit: 100, Window: time.Minute, Burst: 20}
	reqs := []limit.Request{
		{Key: "app-1|", Tag: "app-1", Params: &total},
		{Key: "app-1|/v1/user", Tag: "app-1", Params: &user},
	}
	res := make([]limit.Result, len(reqs))
	allowed, err := store.Allow(context.Background(), time.Now(), reqs, res)
	switch {
	case errors.Is(err, limit.ErrCircuitOpen):
		fmt.Println("Redis is down: decide by the fail mode, at once")
	case err != nil:
		fmt.Println("Redis failed or was slow:", err)
	case allowed:
		fmt.Println("admitted; remaining on /v1/user:", res[1].Remaining)
	default:
		fmt.Println("limited; retry after", res[1].RetryAfter)
	}
}
