package redisstore

import (
	"context"
	"fmt"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// maxLeaseWaits is how many other requests' calls for a key's lease a
// request waits for before it calls Redis itself.
const maxLeaseWaits = 4

// takeWaiting is take for a request that, when another request is asking
// Redis for the lease it needs, waits for that one's answer and takes
// again (start, ns since the epoch, is then the time it took again). A
// request that wakes to find the lease spent already and the next one
// asked for meanwhile waits for that one too, rather than call Redis for
// itself: a busy key's requests then cost one call per lease, not one
// per request woken too late for the tokens. It waits so up to
// maxLeaseWaits times, and not once a lease of its keys is contested
// (near the limit, every request is a call). A retake is not counted
// again in its keys' rates.
func (ls *tokenLeases) takeWaiting(ctx context.Context, keys []string, reqs []limit.Request, res []limit.Result, start *int64, rates, have []int64) (bool, *leaseClaim, error) {
	ok, claim, wait := ls.take(keys, reqs, res, *start, rates, have)
	for waits := 1; wait != nil; waits++ {
		// Its answer comes no later than this request's own would.
		select {
		case <-wait:
		case <-ctx.Done():
			return false, nil, fmt.Errorf("redis: %w", ctx.Err())
		}
		*start = ls.now()
		ok, claim, wait = ls.takeOnce(keys, reqs, res, *start, rates, have, false)
		if wait != nil && (waits >= maxLeaseWaits || !ls.grantable(keys, reqs)) {
			wait = nil
		}
	}
	if !ok {
		// The request goes to Redis. Tokens of its keys on their way back
		// get there first: Redis's answer then counts them as room, as
		// the gateway no longer holds them (Result.Remaining is the room
		// Redis has beside the tokens the gateway holds).
		for back := ls.returning(keys); back != nil; back = ls.returning(keys) {
			select {
			case <-back:
				*start = ls.now()
			case <-ctx.Done():
				if claim != nil {
					ls.release(claim)
				}
				return false, nil, fmt.Errorf("redis: %w", ctx.Err())
			}
		}
	}
	return ok, claim, nil
}

// grantable reports whether every lease of keys may be granted tokens:
// each exists and none is contested.
func (ls *tokenLeases) grantable(keys []string, reqs []limit.Request) bool {
	for i, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil {
			return false
		}
		l.mu.Lock()
		c := contested(l.room, reqs[i].Params.Limit)
		l.mu.Unlock()
		if c {
			return false
		}
	}
	return true
}
