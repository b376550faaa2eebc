package limit

import (
	_ "embed"
	"fmt"
)

// The Redis store's key budget (docs/fleet.md, "Redis: one limit for a fleet
// of gateways", "Key budget"): the counters of callers (requests with an
// Overflow key) are bounded in Redis for the whole fleet, as MaxKeys bounds
// them in memory. A script may touch the keys of one Redis Cluster slot
// only, so the budget is split over RedisBuckets slots: callers are tagged
// with one of them (CallerTag), and each keeps a sorted set of its live
// caller counters beside them, with its share of the budget
// (redis_budget.lua).

// DefaultRedisMaxKeys is the default RedisConfig.MaxKeys.
const DefaultRedisMaxKeys = 1_000_000

// RedisBuckets is the number of tags CallerTag spreads callers over, and
// the number of parts of the Redis store's key budget.
const RedisBuckets = 64

// budgetLua runs before the decision's script (redis.lua) and may send new
// callers to their overflow counter.
//
//go:embed redis_budget.lua
var budgetLua string

// callerTags are CallerTag's values: "~00" to "~63". No app ID contains
// "~", so they name no app's slot.
var callerTags = func() (t [RedisBuckets]string) {
	for i := range t {
		t[i] = fmt.Sprintf("~%02d", i)
	}
	return t
}()

// CallerTag returns the Request.Tag of a call whose every request is
// keyed by caller (a client address group): one of RedisBuckets tags,
// chosen by a hash of caller that every gateway computes alike. Callers
// then spread over RedisBuckets Redis Cluster slots, each of which keeps
// the count of its callers' counters for the key budget
// (RedisConfig.MaxKeys).
func CallerTag(caller string) string {
	// FNV-1a, 32 bits.
	h := uint32(2166136261)
	for i := 0; i < len(caller); i++ {
		h ^= uint32(caller[i])
		h *= 16777619
	}
	return callerTags[h%RedisBuckets]
}

// isCallerTag reports whether tag is one of CallerTag's.
func isCallerTag(tag string) bool {
	return len(tag) == 3 && tag[0] == '~' && tag[1] >= '0' && tag[1] <= '9' && tag[2] >= '0' && tag[2] <= '9'
}

// budgetSet returns the Redis key of the sorted set of the caller counters
// tagged tag. "#" never follows the tag of a counter (redisKey).
func budgetSet(tag string) string {
	return "gw:{" + tag + "}#callers"
}

// budgetOf returns the number of caller counters that the set of tag may
// hold: a CallerTag's share of the budget, rounded up, or the whole budget
// for an app's own slot (an app whose limits mix per-caller and app-wide
// counters keeps its callers' counters with its own).
func (r *Redis) budgetOf(tag string) int64 {
	if isCallerTag(tag) {
		return (r.maxKeys + RedisBuckets - 1) / RedisBuckets
	}
	return r.maxKeys
}

// budgetArgs appends the key budget's script arguments (redis_budget.lua)
// to args: for each request of reqs with an Overflow key, its index in
// KEYS and the Redis key of its overflow counter; then the set of tag and
// its budget; and last the number of those requests, 0 when the store has
// no budget.
func (r *Redis) budgetArgs(args []any, reqs []Request, tag string) []any {
	m := 0
	if r.maxKeys > 0 {
		for i := range reqs {
			if o := reqs[i].Overflow; o != "" {
				args = append(args, i+1, redisKey(tag, o))
				m++
			}
		}
		if m > 0 {
			args = append(args, budgetSet(tag), r.budgetOf(tag))
		}
	}
	return append(args, m)
}
