package stores

import (
	"context"
	"math"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
)

// minSlotTTL bounds the life of a Redis slot below: a SlotTTL (`serve`'s
// --upstream-timeout) shorter than this would have the slots renewed more
// often than a second's fraction.
const minSlotTTL = time.Second

// newRedisSlots builds the Redis store's Slots, whose slots expire
// SlotTTL (at least minSlotTTL) after they were taken or last
// renewed, and, for --fail-mode local, the memory Slots with the local
// share of each concurrency (see docs/algorithms.md, "Concurrency: requests in
// flight").
func (st *stores) newRedisSlots(cfg Config) error {
	rs, err := redisstore.NewSlots(st.redis, redisstore.SlotsConfig{
		TTL: max(cfg.SlotTTL, minSlotTTL),
		OnError: func(err error) {
			cfg.Logger.Warn("renewing the slots of requests in flight failed; they expire unless a later renewal succeeds", "err", err)
		},
	})
	if err != nil {
		return err
	}
	st.redisSlots, st.slots = rs, rs
	if cfg.FailMode == failmode.Local && cfg.LocalShare == 0 {
		st.localSlots = &fleetSlots{mem: limit.NewMemorySlots(), red: st.redis}
	}
	return nil
}

// fleetSlots is the local Slots of --local-share auto: memory slots,
// each concurrency × 1 / the fleet size last seen in Redis, rounded up
// (fleetShare's share).
type fleetSlots struct {
	mem *limit.MemorySlots
	red *redisstore.Store
}

var _ limit.Slots = (*fleetSlots)(nil)

// Acquire takes the slots in memory with their limits scaled.
func (f *fleetSlots) Acquire(ctx context.Context, reqs []limit.SlotRequest) (limit.Permit, int, error) {
	share := (&fleetShare{red: f.red}).share()
	scaled := make([]limit.SlotRequest, len(reqs))
	for i, q := range reqs {
		q.Limit = min(max(int64(math.Ceil(float64(q.Limit)*share-1e-9)), 1), q.Limit)
		scaled[i] = q
	}
	return f.mem.Acquire(ctx, scaled)
}
