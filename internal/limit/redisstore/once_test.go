package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisOnce: of many claims of one key by three stores on one Redis,
// at once, exactly one is first; the key then expires on its own.
func TestRedisOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stores := make([]*Store, 3)
	for i := range stores {
		stores[i], _ = newFixedRedis(t, srv)
	}
	ctx := context.Background()
	var first atomic.Int64
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Go(func() {
			ok, err := stores[g%3].Once(ctx, "gw:alert:{app-1}:once", time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				first.Add(1)
			}
		})
	}
	wg.Wait()
	if n := first.Load(); n != 1 {
		t.Errorf("first claims: got %d, want 1", n)
	}
	ttl, err := stores[0].client.PTTL(ctx, "gw:alert:{app-1}:once").Result()
	if err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("the key's time to live: got %v (%v), want at most an hour", ttl, err)
	}
}
