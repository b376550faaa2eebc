package redisstore

import (
	"context"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Reset deletes the counter key with tag from Redis, with its lockout,
// for the whole fleet. A gateway that cached a denial of the key (the
// deny cache) goes on denying it until that denial's end.
func (r *Store) Reset(ctx context.Context, key, tag string) (bool, error) {
	q := limit.Request{Key: key, Tag: tag}
	n, err := r.client.Del(ctx, redisKey(redisTag(&q), key)).Result()
	return n > 0, err
}
