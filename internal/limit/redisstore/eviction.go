package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicy returns, by node address, the maxmemory-policy of the
// nodes that hold counters whose policy lets Redis evict them when full:
// allkeys-*, and volatile-* too, since every counter has a TTL. It is
// empty when none can. A counter Redis evicts starts again from zero, so
// the fleet admits up to a limit more; with noeviction a full Redis
// refuses the script (OOM), which the store reports as a failure for the
// fail mode to decide, never as an admission. A node that refuses CONFIG
// GET (a managed Redis) is left out.
func (r *Store) EvictionPolicy(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.wait.dial)
	defer cancel()
	var mu sync.Mutex
	out := map[string]string{}
	check := func(ctx context.Context, c *redis.Client) error {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr):
			return nil // CONFIG is not allowed here: nothing to tell
		case err != nil:
			return fmt.Errorf("%s: config get maxmemory-policy: %w", c.Options().Addr, err)
		}
		if p := m["maxmemory-policy"]; p != "" && p != "noeviction" {
			mu.Lock()
			out[c.Options().Addr] = p
			mu.Unlock()
		}
		return nil
	}
	return out, r.eachNode(ctx, check)
}

// eachNode calls check with a client of each node that holds counters:
// the server, the Sentinel's master, or each master of a Cluster, at
// once.
func (r *Store) eachNode(ctx context.Context, check func(context.Context, *redis.Client) error) error {
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, check)
	case *redis.Client:
		return check(ctx, c)
	}
	return nil
}
