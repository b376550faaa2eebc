package redisstore

import (
	"context"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// counterFields returns the fields of the counter at key, whichever Redis
// type holds it (redistest.Fields); none if the key does not exist. It
// fails t if they cannot be read.
func counterFields(t testing.TB, c redis.Cmdable, key string) map[string]string {
	t.Helper()
	f, err := redistest.Fields(context.Background(), c, key)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// setCounterFields sets fields of the counter at key (name, value, …)
// whichever Redis type holds it (redistest.SetFields), and fails t if it
// cannot.
func setCounterFields(t testing.TB, c redis.Cmdable, key string, pairs ...string) {
	t.Helper()
	if err := redistest.SetFields(context.Background(), c, key, pairs...); err != nil {
		t.Fatal(err)
	}
}
