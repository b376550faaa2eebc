package redisstore

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// leaseReturnLua gives a lease's unspent tokens back to Redis.
//
//go:embed lease_return.lua
var leaseReturnLua string

var leaseReturnScript = redis.NewScript(leaseReturnLua)

// giveBack gives tokens of leases back to Redis, in one round trip per
// node, within one call's time: each return counts only if the bucket
// its tokens were counted in still counts (lease_return.lua). A return
// that fails loses its tokens to the fleet until their bucket ends, as
// before there were returns; it is never sent twice.
func (r *Store) giveBack(back []leaseReturn) {
	ctx, cancel := context.WithTimeout(context.Background(), r.callTimeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(back))
	run := func(p redis.Pipeliner, sha bool) {
		for i := range back {
			t := &back[i]
			args := []any{t.shape(), t.bucket, t.n}
			if sha {
				cmds[i] = p.EvalSha(ctx, leaseReturnScript.Hash(), []string{t.key}, args...)
			} else {
				cmds[i] = p.Eval(ctx, leaseReturnLua, []string{t.key}, args...)
			}
		}
	}
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, true); return nil })
	if cmds[0].Err() != nil && isNoScript(cmds[0].Err()) {
		_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, false); return nil })
	}
	for _, c := range cmds {
		if n, err := c.Int64(); err == nil {
			r.leases.returned.Add(n)
		}
	}
}
