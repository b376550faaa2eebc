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

// budgetArgs appends the key budget's script arguments (budget.lua)
// to args: for each request of reqs with an Overflow key, "i over", its
// index in KEYS and the Redis key of its overflow counter; then "m budget
// set", the number of those requests, the budget and the set of tag; or
// "0" alone, when there are none or the store has no budget. Each is the
// same string on every call of a rule (or tag), which the library parses
// once.
func (r *Store) budgetArgs(args []any, reqs []limit.Request, tag string) []any {
	m := 0
	if r.maxKeys > 0 {
		for i := range reqs {
			if o := reqs[i].Overflow; o != "" {
				args = append(args, strconv.Itoa(i+1)+" "+redisKey(tag, o))
				m++
			}
		}
	}
	if m == 0 {
		return append(args, "0")
	}
	return append(args, strconv.Itoa(m)+" "+strconv.FormatInt(r.budgetOf(tag), 10)+" "+budgetSet(tag))
}
