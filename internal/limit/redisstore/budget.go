package redisstore

import (
	_ "embed"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// The Redis store's key budget (docs/fleet.md, "Redis: one limit for a fleet
// of gateways", "Key budget"): the counters of callers (requests with an
// Overflow key) are bounded in Redis for the whole fleet, as MaxKeys bounds
// them in memory. A script may touch the keys of one Redis Cluster slot
// only, so the budget is split over limit.CallerBuckets slots: callers are
// tagged with one of them (limit.CallerTag), and each keeps a sorted set of its live
// caller counters beside them, with its share of the budget
// (budget.lua).

// DefaultMaxKeys is the default Config.MaxKeys.
const DefaultMaxKeys = 1_000_000

// budgetLua runs before the decision's script (redis.lua) and may send new
// callers to their overflow counter.
//
//go:embed budget.lua
var budgetLua string

// budgetSet returns the Redis key of the sorted set of the caller counters
// tagged tag. "#" never follows the tag of a counter (redisKey).
func budgetSet(tag string) string {
	return "gw:{" + tag + "}#callers"
}

// budgetOf returns the number of caller counters that the set of tag may
// hold: a CallerTag's share of the budget, rounded up, or the whole budget
// for an app's own slot (an app whose limits mix per-caller and app-wide
// counters keeps its callers' counters with its own).
func (r *Store) budgetOf(tag string) int64 {
	if limit.IsCallerTag(tag) {
		return (r.maxKeys + limit.CallerBuckets - 1) / limit.CallerBuckets
	}
	return r.maxKeys
}

// budgetArgs appends the key budget's script argument (budget.lua) to
// args: "0" when no request of reqs has an Overflow key or the store has
// no budget; else "m budget n set", with the number of requests with an
// Overflow key, the budget and the set of tag, and for each of those
// " i n over", with its index in KEYS and the Redis key of its overflow
// counter; n is the length of what follows it. It is the same string on
// every call of a rule (and tag), which the library parses once.
func (r *Store) budgetArgs(args []any, reqs []limit.Request, tag string) []any {
	m := 0
	if r.maxKeys > 0 {
		for i := range reqs {
			if reqs[i].Overflow != "" {
				m++
			}
		}
	}
	if m == 0 {
		return append(args, "0")
	}
	set := budgetSet(tag)
	b := make([]byte, 0, 32+len(set)+m*(48+len(tag)))
	b = strconv.AppendInt(b, int64(m), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.budgetOf(tag), 10)
	b = appendField(b, set)
	for i := range reqs {
		if o := reqs[i].Overflow; o != "" {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(i+1), 10)
			b = appendField(b, redisKey(tag, o))
		}
	}
	return append(args, string(b))
}

// appendField appends " n s" to b, n the length of s.
func appendField(b []byte, s string) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ' ')
	return append(b, s...)
}
