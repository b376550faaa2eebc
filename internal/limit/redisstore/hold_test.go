package redisstore

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestHoldRelease runs limittest.HoldRelease on the Redis store, deciding
// on a fixed clock.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limittest.HoldRelease(t, func(t *testing.T, now time.Time) limit.Store {
		r, c := newFixedRedis(t, srv)
		c.us.Store(now.UnixMicro())
		return r
	})
}

// TestRepeatedKey runs limittest.RepeatedKey on the Redis store, deciding
// on a fixed clock.
func TestRepeatedKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limittest.RepeatedKey(t, func(t *testing.T, now time.Time) limit.Store {
		r, c := newFixedRedis(t, srv)
		c.us.Store(now.UnixMicro())
		return r
	})
}

// TestReserve runs limittest.Reserve on the Redis store, deciding on a
// fixed clock that the check moves.
func TestReserve(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limittest.Reserve(t, func(t *testing.T, now time.Time) (limit.Store, func(time.Time)) {
		r, c := newFixedRedis(t, srv)
		c.us.Store(now.UnixMicro())
		return r, func(at time.Time) { c.us.Store(at.UnixMicro()) }
	})
}

// TestOver runs limittest.Over on the Redis store, deciding on a fixed
// clock that the check moves.
func TestOver(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	limittest.Over(t, func(t *testing.T, now time.Time) (limit.Store, func(time.Time)) {
		r, c := newFixedRedis(t, srv)
		c.us.Store(now.UnixMicro())
		return r, func(at time.Time) { c.us.Store(at.UnixMicro()) }
	})
}
