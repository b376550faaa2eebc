package redisstore

import (
	_ "embed"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// The Redis store's key budget (docs/fleet.md, "Redis: one limit for a fleet
// of gateways", "Key budget"): the counters of callers (requests with an
// Overflow key) are created only while the Redis database they live in,
// the node's on a Cluster, holds fewer than MaxKeys keys (DBSIZE, read in
// the script: budget.lua), as MaxKeys bounds them in memory; past it, a
// new caller counts on its rule's overflow counter.

// DefaultMaxKeys is the default Config.MaxKeys.
const DefaultMaxKeys = 1_000_000

// budgetLua runs before the decision's script (redis.lua) and may send new
// callers to their overflow counter.
//
//go:embed budget.lua
var budgetLua string

// budgetArgs appends the key budget's script argument (budget.lua) to
// args: "0" when no request of reqs has an Overflow key or the store has
// no budget; else "m budget", with the number of requests with an
// Overflow key and the budget, and for each of those " i n over", with
// its index in KEYS and the Redis key of its overflow counter, n its
// length. It is the same string on every call of a rule (and tag), which
// the library parses once.
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
	b := make([]byte, 0, 24+m*(48+len(tag)))
	b = strconv.AppendInt(b, int64(m), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.maxKeys, 10)
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
