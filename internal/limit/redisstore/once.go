package redisstore

import (
	"context"
	"time"
)

// Once reports whether this call is the first to claim key in the
// fleet: it sets key in Redis if it is not set (SET NX), to expire after
// ttl, and reports whether it did. The gateways of a fleet that share
// the Redis get true once per key until it expires; budget alerts use it
// to fire once per fleet. The caller puts its hash tag in key for a
// Redis Cluster.
func (r *Store) Once(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return r.client.SetNX(ctx, key, 1, max(ttl, time.Millisecond)).Result()
}
