package redisstore

import (
	"context"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// This file is a call's leases (docs/fleet.md, "Leases"): what a call
// takes from them before it asks Redis, what it asks Redis to lease, and
// what it does with the tokens Redis grants. The leases themselves are
// lease.go's.

// withLeases decides the call from the leases of its limits when each
// has a token; else it spends the tokens some have, asks (ask, ask.go)
// for the rest and for the leases' next tokens, and puts the tokens it
// spent back when the request is not admitted (finish). Leases go first:
// their tokens are counted already, and a denial another request met
// meanwhile must not leave them unspent. They need the gateway's clock to
// run with Redis's: not on a test's fixed decision clock (allow checks).
func (c *call) withLeases(ctx context.Context) (allowed bool, err error) {
	r := c.r
	var ok bool
	ok, c.lease, err = r.fromLeases(ctx, c.now, c.keys, c.reqs, c.res, c.tag, &c.start)
	if err != nil || ok {
		// The claim, if any, is the background refill's.
		tracing.Source(ctx, "lease")
		return ok, err
	}
	c.claimAsked = c.lease.claim != nil
	defer func() { c.finish(allowed) }()
	if c.spendSome() {
		tracing.Source(ctx, "lease")
		return true, nil
	}
	return c.ask(ctx)
}

// spendSome spends a token of every limit whose lease has one, and
// narrows the call to the others, which go to Redis: a token held for one
// limit of a request is never left unspent because another's lease is
// empty. It reports whether that decided every limit. When Redis then
// denies the request, finish puts the tokens back.
func (c *call) spendSome() bool {
	if c.lease == nil {
		return false
	}
	taken, rest := c.r.leases.takeSome(c.keys, c.reqs, c.res, c.start)
	if taken == nil {
		return false
	}
	if len(rest) == 0 {
		c.r.stats.decisions.Add(1)
		return true
	}
	c.taken, c.rest, c.spentSome = taken, rest, true
	c.keys, c.reqs, c.res, c.lease = pick(c.keys, rest), pick(c.reqs, rest), make([]limit.Result, len(rest)), c.lease.pick(rest)
	return false
}

// finish ends the call: the Results of a narrowed call go back to their
// places, the tokens spendSome took go back to their leases when the
// request was not admitted, and the claim on the leases is released.
func (c *call) finish(allowed bool) {
	if c.spentSome {
		for j, i := range c.rest {
			c.full[i] = c.res[j]
		}
		if !allowed {
			c.r.leases.putBack(c.taken, c.fullReqs, c.full, c.start)
		}
	}
	if c.claimAsked {
		c.r.leases.release(c.lease.claim)
	}
}

// granted records the leases Redis granted the call, and the tokens the
// gateway holds in each Result's Remaining; nothing for a call that
// asked for no lease.
func (c *call) granted(d scriptAnswer) {
	if c.lease == nil {
		return
	}
	if d.allowed && c.lease.claim != nil {
		c.r.leases.grant(c.keys, c.reqs, c.res, d.grants, c.start, 1)
	}
	c.r.leases.unspent(c.keys, c.reqs, c.res, c.start)
}

// pick returns the elements of s at idx.
func pick[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

// pick returns what ask asks for the limits at idx.
func (ask *leaseAsk) pick(idx []int) *leaseAsk {
	return &leaseAsk{rates: pick(ask.rates, idx), have: pick(ask.have, idx), claim: ask.claim}
}

// leaseAsk is what a call asks of the leases of its limits: rates[i] and
// have[i] are the rate limit i's lease should cover and the tokens the
// gateway still holds of it (all rates 0: no lease); claim, when not nil,
// holds the leases this call asks for.
type leaseAsk struct {
	rates, have []int64
	claim       *leaseClaim
	// refill marks a call that only asks for the next lease.
	refill bool
	// buf holds rates and have of a call of few limits.
	buf [4]int64
}

// newLeaseAsk returns a leaseAsk for a call of n limits that asks for
// nothing yet: in one allocation, for a call of up to two.
func newLeaseAsk(n int) *leaseAsk {
	ask := &leaseAsk{}
	if 2*n <= len(ask.buf) {
		ask.rates, ask.have = ask.buf[:n:n], ask.buf[n:2*n:2*n]
	} else {
		ask.rates, ask.have = make([]int64, n), make([]int64, n)
	}
	return ask
}

// fromLeases decides reqs from the leases of keys if it can, and reports
// whether it admitted them. Otherwise it returns what the call to Redis
// should ask for, having waited, if other requests were asking for the
// same leases, for their answers (takeWaiting; start is then the new
// start). A request admitted from the last quarter of a lease asks for
// the next one in the background.
func (r *Store) fromLeases(ctx context.Context, now time.Time, keys []string, reqs []limit.Request, res []limit.Result, tag string, start *int64) (bool, *leaseAsk, error) {
	n := len(reqs)
	ask := newLeaseAsk(n)
	ok, claim, err := r.leases.takeWaiting(ctx, keys, reqs, res, start, ask.rates, ask.have)
	if err != nil {
		return false, nil, err
	}
	ask.claim = claim
	if ok {
		r.stats.decisions.Add(1)
		if claim != nil {
			keys, reqs := slices.Clone(keys), slices.Clone(reqs)
			if !r.leases.background(func() { r.refill(now, keys, reqs, tag, ask) }) {
				r.leases.release(claim) // closed: no next lease
			}
		}
	}
	return ok, ask, nil
}

// refill asks Redis for the next leases of reqs, whose claim ask holds:
// a call that counts no request, only tokens.
func (r *Store) refill(now time.Time, keys []string, reqs []limit.Request, tag string, ask *leaseAsk) {
	defer r.leases.release(ask.claim)
	for i := range ask.rates {
		ask.rates[i] = max(ask.rates[i], 1) // every token counted is leased
	}
	ask.refill = true
	args := r.scriptArgs(now, reqs, tag, ask)
	start := r.clock()
	ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
	defer cancel()
	res := make([]limit.Result, len(reqs))
	d, err := r.decide(ctx, keys, reqs, args, res)
	switch {
	case err != nil:
		r.leasedLate(err, keys, reqs, 0)
	case d.allowed:
		r.leases.grant(keys, reqs, res, d.grants, start, 0)
	}
}
