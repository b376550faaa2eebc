package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/redis/go-redis/v9"
)

// This file is what a call asks when leases did not decide it (allow.go,
// lease.go): the deny cache, else Redis: the script's arguments, the
// call through the node's breaker and batcher (batch.go, many.go,
// store.go), the answer read into the Results, and a denial while other
// gateways' leased tokens may come back (waitForTokens). It returns the
// answer to the call that asked: the leases keep what Redis granted
// them (granted, lease.go), the call remembers a denial (remember,
// allow.go).

// argsPerLimit is the most script arguments per limit, and
// resultsPerLimit the number of values of the reply per limit
// (redis.lua).
const (
	argsPerLimit    = 3
	resultsPerLimit = 8
)

// ask decides what leases did not: the deny cache denies the call, or
// Redis decides it (d.decided), and the store records what each key
// holds (known.go). It returns a zero answer with an error.
func (c *call) ask(ctx context.Context) (scriptAnswer, error) {
	if c.cachedDenial() {
		tracing.Source(ctx, "deny_cache")
		return scriptAnswer{}, nil
	}
	tracing.Source(ctx, "redis")
	d, err := c.decide(ctx)
	if err != nil {
		return scriptAnswer{}, err
	}
	c.r.known.record(c.reqs, c.res, c.start)
	return d, nil
}

// cachedDenial reports whether the deny cache denies the call without
// asking Redis. A charge must reach Redis: it counts whatever the limit
// says; so must a request that may wait, whose room may be ahead.
func (c *call) cachedDenial() bool {
	r := c.r
	if r.deny == nil || c.mustAsk || !r.deny.lookup(c.keys, c.reqs, c.start, c.res) {
		return false
	}
	r.stats.decisions.Add(1)
	return true
}

// decide asks Redis, and asks again while a denial may turn into an
// admission: other gateways stop using tokens they hold and give them
// back within LeaseIdle, so a denial while some may be held waits for
// them, up to LeaseWait (waitForTokens).
func (c *call) decide(ctx context.Context) (scriptAnswer, error) {
	r := c.r
	args := r.scriptArgs(c.now, c.reqs, c.tag, c.lease)
	d, err := r.decide(ctx, c.keys, c.reqs, args, c.res)
	if err != nil {
		return d, c.late(err)
	}
	r.stats.decisions.Add(1)
	r.stats.overflowed.Add(d.overflowed)
	return c.waitForTokens(ctx, d, args)
}

// waitForTokens decides d's call again while Redis denies it and tokens
// of its limits may come back, until LeaseWait after that first denial
// (not the call's start: on a loaded machine the first call may have
// taken most of it).
// The waits double from 2ms (2, 6, 14, 30, 50ms with LeaseWait): a
// burst's tokens come back within a few ms, a steady key's within
// LeaseIdle.
func (c *call) waitForTokens(ctx context.Context, d scriptAnswer, args []any) (scriptAnswer, error) {
	r := c.r
	hold := r.leaseWait + r.leases.idleOr0()
	for pause, deadline := minLeaseIdle, r.clock()+int64(r.leaseWait); !d.allowed && c.mayComeBack(d, hold) && r.clock() < deadline; pause *= 2 {
		t := time.NewTimer(min(pause, max(time.Duration(deadline-r.clock()), time.Millisecond)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return d, fmt.Errorf("redis: %w", ctx.Err())
		}
		var err error
		if d, err = r.decide(ctx, c.keys, c.reqs, args, c.res); err != nil {
			return d, c.late(err)
		}
	}
	return d, nil
}

// late returns err, an error of decide for the call, ready for
// AdmittedLocally.
func (c *call) late(err error) error {
	return c.r.late(err, c.now, c.fullReqs)
}

// late returns err, an error of decide for reqs at now, ready for
// AdmittedLocally.
func (r *Store) late(err error, now time.Time, reqs []limit.Request) error {
	var le *lateError
	if !errors.As(err, &le) {
		return r.lateFor(err, nil, now, reqs)
	}
	return r.lateFor(le.err, le.call, now, reqs)
}

// scriptArgs returns the script's arguments for reqs (redis.lua), with
// leases as ask says (nil: none).
func (r *Store) scriptArgs(now time.Time, reqs []limit.Request, tag string, ask *leaseAsk) []any {
	n := len(reqs)
	args := make([]any, 1, 1+argsPerLimit*n+2*n+3)
	args[0] = ""
	if r.fixedNow != nil {
		args[0] = strconv.FormatInt(r.fixedNow(), 10)
	}
	// Each lease is sized by the slowest of the request's keys: a
	// request is admitted from leases only when all of them have a
	// token, so a bigger lease on a busier key (an app total) would be
	// left unspent; the script leases each only what it lacks of that.
	var rate, fleet int64
	if ask != nil {
		rate, fleet = slices.Min(ask.rates), max(r.fleet.size.Load(), 1)
		if ask.refill {
			rate = -rate
		} else if rate*int64(leaseAhead) <= int64(time.Second) {
			// A lease would hold no token beyond the request's, which
			// the gateway keeps none of (tokenLeases.grant): the usual
			// call decides, counts and writes the same, at less cost to
			// Redis. So are a cold key's second requests decided.
			rate = 0
		}
	}
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		mode, shadow := scriptMode(q)
		var have int64
		if rate != 0 {
			have = ask.have[i]
		}
		args = append(args, r.reuse.settings.arg(settingsParts{p: *p, hashes: r.hashes}, settingsArg))
		if units := q.Units(); units == 1 && mode == '-' && !shadow && rate == 0 && q.Wait <= 0 {
			args = append(args, "")
		} else {
			b := make([]byte, 0, 48)
			b = strconv.AppendInt(b, units, 10)
			b = append(b, ' ', mode, ' ', '0', ' ')
			if shadow {
				b[len(b)-2] = '1'
			}
			b = strconv.AppendInt(b, rate, 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, fleet, 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, have, 10)
			if q.Wait > 0 {
				b = append(b, ' ')
				b = strconv.AppendInt(b, max(q.Wait.Microseconds(), 1), 10)
			}
			args = append(args, string(b))
		}
		if p.Calendar != "" {
			args = append(args, calendarArg(p, now))
		}
	}
	return r.budgetArgs(args, reqs, tag)
}

// scriptAnswer is Redis's answer to one script call; as a call's answer
// (allow), what decided it: Redis (decided), or leases or the deny cache.
type scriptAnswer struct {
	allowed, decided bool
	// grants are the tokens leased for each limit; ages the time since
	// each limit's last lease of more than one token, -1 for none.
	grants     []leaseGrant
	ages       []time.Duration
	overflowed int64
}

// decide runs the script for keys and args on their node, through its
// breaker and batcher, and writes each limit's Result into res. When
// Redis does not decide, the error is a lateError if what became of the
// call is known or may become known (see lateCall). Each decide is a
// call of its own, with an ID of its own (memo.go).
func (r *Store) decide(ctx context.Context, keys []string, reqs []limit.Request, args []any, res []limit.Result) (scriptAnswer, error) {
	return r.decideMemo(ctx, memoFor(reqs, r.memoLife()), keys, reqs, args, res)
}

// decideMemo is decide for a call with m, which Redis runs once however
// often it is sent.
func (r *Store) decideMemo(ctx context.Context, m memo, keys []string, reqs []limit.Request, args []any, res []limit.Result) (scriptAnswer, error) {
	d, late, err := r.decideOnce(ctx, m, keys, reqs, args, res)
	if err != nil && late != nil {
		err = &lateError{err: err, call: late}
	}
	return d, err
}

// nodeOf returns the breaker of key's node: on one Redis, its one node;
// in a cluster, the master of key's slot, looked up within wait.call.
func (r *Store) nodeOf(ctx context.Context, key string) (*breaker, error) {
	if b := r.nodes.single; b != nil {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.wait.call)
	defer cancel()
	return r.breakerFor(ctx, key)
}

func (r *Store) decideOnce(ctx context.Context, m memo, keys []string, reqs []limit.Request, args []any, res []limit.Result) (scriptAnswer, *lateCall, error) {
	n := len(reqs)
	b, err := r.nodeOf(ctx, keys[0])
	if err != nil {
		return scriptAnswer{}, &lateCall{r: r, outcome: lateNotCounted}, err
	}
	ok, probe := b.allow()
	if !ok {
		r.reloadSlots()
		return scriptAnswer{}, &lateCall{r: r, outcome: lateNotCounted}, limit.ErrCircuitOpen
	}
	// The wait for the answer needs no deadline of its own: await bounds
	// it by Timeout in the queue and Timeout in flight, within
	// wait.call.
	var cr callResult
	if r.batch.max > 1 {
		cr, err = r.batcherFor(b).do(ctx, r, keys, args, m)
	} else {
		cr, err = r.alone(ctx, keys, args, m)
	}
	v, shared, late := cr.v, cr.shared, cr.late
	if err != nil {
		if late == nil && (isScriptError(err) || isRedirect(err) || errors.Is(err, redis.ErrPoolTimeout) || notSent(err)) {
			// Redis refused the call, or it was never sent.
			late = &lateCall{r: r, outcome: lateNotCounted}
		}
		if late == nil {
			// Sent, and its round trip failed: it may have run, under
			// the memo it went with.
			late = &lateCall{r: r, outcome: lateUnknown, closed: closedFate(err)}
			late.sentUnder(cr.memo, cr.first, cr.together)
		}
		switch {
		case shared:
			// Another call of the same round trip told the breaker.
			b.abandon(probe)
		case ctx.Err() != nil:
			// The caller went away: that says nothing about Redis.
			b.abandon(probe)
			return scriptAnswer{}, late, fmt.Errorf("redis: %w", ctx.Err())
		case errors.Is(err, redis.ErrPoolTimeout), isSlotRefusal(err):
			// Every connection is busy (this process is short of
			// connections), or the node cannot serve the key's slot now
			// (moved, being migrated, or down in the cluster): the node is
			// not known to fail.
			b.abandon(probe)
		default:
			b.failure(probe)
		}
		if ctx.Err() == nil && !errors.Is(err, redis.ErrPoolTimeout) {
			r.reloadSlots() // a cluster's master may have moved
		}
		return scriptAnswer{}, late, fmt.Errorf("redis: %w", err)
	}
	b.success()
	if len(v) != 2+resultsPerLimit*n {
		return scriptAnswer{}, nil, replyShapeError{got: len(v), n: n}
	}
	d := scriptAnswer{allowed: v[0] == 1, decided: true, overflowed: v[len(v)-1]}
	if n == 1 {
		// One allocation for both, for a call of one limit.
		one := new(struct {
			g [1]leaseGrant
			a [1]time.Duration
		})
		d.grants, d.ages = one.g[:], one.a[:]
	} else {
		d.grants, d.ages = make([]leaseGrant, n), make([]time.Duration, n)
	}
	for i := range reqs {
		w := v[1+resultsPerLimit*i:]
		res[i] = limit.Result{
			Allowed:    w[0] == 1,
			Limit:      reqs[i].Params.Limit,
			Remaining:  w[1],
			Reset:      time.Duration(w[2]) * time.Microsecond,
			RetryAfter: time.Duration(w[3]) * time.Microsecond,
		}
		if w[0] == 1 {
			// An admission reports the delay until the instant it was
			// reserved at, if any, where a denial reports its wait.
			res[i].Delay, res[i].RetryAfter = res[i].RetryAfter, 0
		}
		d.grants[i] = leaseGrant{n: w[4], span: time.Duration(w[5]) * time.Microsecond, bucket: w[6]}
		if reqs[i].Act == limit.Read {
			// A read leases nothing: its slots of tokens leased and of
			// their bucket's end hold the units past the limit and those
			// held (redis.lua).
			res[i].Over, res[i].Held, d.grants[i] = w[4], w[5], leaseGrant{}
		}
		d.ages[i] = -1
		if w[7] >= 0 {
			d.ages[i] = time.Duration(w[7]) * time.Microsecond
		}
	}
	return d, nil, nil
}

// replyShapeError is the error of a reply of got values to a call of n
// limits, which fit no reply of such a call: a reply Redis kept of
// another call (memo.go), as a write-back sent under the memo of the call
// it follows may get (lateCall.settle).
type replyShapeError struct{ got, n int }

func (e replyShapeError) Error() string {
	return fmt.Sprintf("redis: script answered %d values for %d limits", e.got, e.n)
}

// scriptMode returns the script's mode letter for q's act (redis.lua) and
// whether the script is to take it as a shadow: a read is decided as a
// deferred shadow request is, which counts nothing and starts no lockout,
// and answers what the key holds past the limit too.
func scriptMode(q *limit.Request) (mode byte, shadow bool) {
	switch q.Act {
	case limit.Charge:
		return 'c', q.Shadow
	case limit.Release:
		return 'r', q.Shadow
	case limit.Hold:
		return 'h', q.Shadow
	case limit.Defer:
		return 'd', q.Shadow
	case limit.Read:
		return 'g', true
	}
	return '-', q.Shadow
}
