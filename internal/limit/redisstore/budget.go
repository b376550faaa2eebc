package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

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
	m, one := 0, 0
	if r.maxKeys > 0 {
		for i := range reqs {
			if reqs[i].Overflow != "" {
				m, one = m+1, i
			}
		}
	}
	switch m {
	case 0:
		return append(args, "0")
	case 1:
		// One caller's counter, as on the cold path: the calls of its rule
		// share the argument (reused).
		b := budgetParts{tag: tag, overflow: reqs[one].Overflow, i: one, maxKeys: r.maxKeys}
		return append(args, r.reuse.budget.arg(b, budgetOne))
	}
	b := make([]byte, 0, 24+m*(48+len(tag)))
	b = strconv.AppendInt(b, int64(m), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.maxKeys, 10)
	for i := range reqs {
		if o := reqs[i].Overflow; o != "" {
			b = appendOverflow(b, i, tag, o)
		}
	}
	return append(args, string(b))
}

// budgetParts are what the key budget's argument of a call with one
// Overflow key says: the call's tag, the key, its index among the call's
// requests, and the budget.
type budgetParts struct {
	tag, overflow string
	i             int
	maxKeys       int64
}

// budgetOne returns the key budget's argument of a call with one
// Overflow key (budgetArgs).
func budgetOne(p budgetParts) string {
	b := make([]byte, 0, 24+48+len(p.tag))
	b = append(b, "1 "...)
	b = strconv.AppendInt(b, p.maxKeys, 10)
	return string(appendOverflow(b, p.i, p.tag, p.overflow))
}

// appendOverflow appends " i n over" to b: the index in KEYS of the
// request i of a call, and the Redis key of its overflow counter o.
func appendOverflow(b []byte, i int, tag, o string) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(i+1), 10)
	return appendField(b, redisKey(tag, o))
}

// appendField appends " n s" to b, n the length of s.
func appendField(b []byte, s string) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ' ')
	return append(b, s...)
}

// CrowdedNodes returns, by node address, the number of keys of each node
// whose database holds at least half the key budget already: the budget
// counts every key of the database, the gateway's and any other
// program's, so a database shared with other data leaves new callers
// little room, or none, and sends them to their overflow counter. It is
// empty when the store has no budget.
func (r *Store) CrowdedNodes(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	if r.maxKeys <= 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.wait.dial)
	defer cancel()
	var mu sync.Mutex
	check := func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: dbsize: %w", c.Options().Addr, err)
		}
		if 2*n >= r.maxKeys {
			mu.Lock()
			out[c.Options().Addr] = n
			mu.Unlock()
		}
		return nil
	}
	return out, r.eachNode(ctx, check)
}

// MaxKeys returns the key budget (Config.MaxKeys); -1 for none.
func (r *Store) MaxKeys() int64 { return r.maxKeys }
