package limit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// argsPerLimit is the most script arguments per limit, and
// resultsPerLimit the number of values of the reply per limit
// (redis.lua).
const (
	argsPerLimit    = 3
	resultsPerLimit = 8
)

// Allow implements Store, with Memory.Allow's semantics, on Redis's clock:
// now, the gateway's clock, only places the calendar windows that the
// script chooses from (a calendar unit, Params.Calendar), and must be
// within a window of Redis's clock; the deny cache and the breaker use
// RedisConfig.Now.
// It returns ErrCircuitOpen while the breaker is open, and an error when
// Redis fails or does not answer within the timeout; a caller's own
// cancellation is returned as such and does not count as a failure.
//
// The requests must share a Tag (Request.Tag) and have distinct keys. A
// request with an Overflow key is counted against it when its own key is
// new and the key budget of its tag is used up (RedisConfig.MaxKeys).
//
// A request that Redis denies while other gateways may hold leased tokens
// of its limits waits up to LeaseWait for them to come back (docs/fleet.md,
// "Leases") and is decided again.
func (r *Redis) Allow(ctx context.Context, now time.Time, reqs []Request, res []Result) (allowed bool, err error) {
	n := len(reqs)
	if len(res) < n {
		return false, fmt.Errorf("limit: %d results for %d requests", len(res), n)
	}
	if n == 0 {
		return true, nil
	}
	keys, tag, charges, err := redisKeys(reqs)
	if err != nil {
		return false, err
	}
	start := r.clock()
	// Leases first: their tokens are counted already, and a denial
	// another request met meanwhile must not leave them unspent. They
	// need the gateway's clock to run with Redis's: not on a test's fixed
	// decision clock.
	var ask *leaseAsk
	if r.leases != nil && r.fixedNow == nil && leasable(reqs) {
		var ok bool
		ok, ask, err = r.fromLeases(ctx, now, keys, reqs, res, tag, &start)
		if err != nil || ok {
			return ok, err
		}
		if ask.claim != nil {
			defer r.leases.release(ask.claim)
		}
	}
	// The limits whose leases have a token spend it, and only the others
	// go to Redis: a token held for one limit of a request is never left
	// unspent because another's lease is empty. When Redis denies the
	// request, the tokens go back to their leases.
	full, fullReqs := res, reqs
	var taken []*tokenLease
	if ask != nil {
		var rest []int
		if taken, rest = r.leases.takeSome(keys, reqs, res, start); taken != nil {
			if len(rest) == 0 {
				r.decisions.Add(1)
				return true, nil
			}
			keys, reqs, res, ask = pick(keys, rest), pick(reqs, rest), make([]Result, len(rest)), ask.pick(rest)
			defer func() {
				for j, i := range rest {
					full[i] = res[j]
				}
				if !allowed {
					r.leases.putBack(taken, fullReqs, full, start)
				}
			}()
		}
	}
	// A charge must reach Redis: it counts whatever the limit says.
	if r.deny != nil && !charges && r.deny.lookup(keys, reqs, start, res) {
		r.decisions.Add(1)
		return false, nil
	}
	args := r.scriptArgs(now, reqs, tag, ask)
	d, err := r.decide(ctx, keys, reqs, args, res)
	if err != nil {
		return false, r.late(err, now, fullReqs)
	}
	r.decisions.Add(1)
	r.overflowed.Add(d.overflowed)
	// Tokens other gateways stop using come back within LeaseIdle: a
	// denial while some may be held is asked again until then.
	back := !charges && d.tokensMayComeBack(reqs, res, r.leaseWait+r.leases.idleOr0())
	// The waits double from 2ms (2, 6, 14, 30, 50ms with LeaseWait):
	// a burst's tokens come back within a few ms, a steady key's within
	// LeaseIdle.
	pause := minLeaseIdle
	for deadline := start + int64(r.leaseWait); !d.allowed && back && r.clock() < deadline; pause *= 2 {
		t := time.NewTimer(min(pause, max(time.Duration(deadline-r.clock()), time.Millisecond)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("redis: %w", ctx.Err())
		}
		if d, err = r.decide(ctx, keys, reqs, args, res); err != nil {
			return false, r.late(err, now, fullReqs)
		}
		back = d.tokensMayComeBack(reqs, res, r.leaseWait+r.leases.idleOr0())
	}
	if ask != nil {
		if d.allowed && ask.claim != nil {
			r.leases.grant(keys, reqs, res, d.grants, start, 1)
		}
		r.leases.unspent(keys, reqs, res, start)
	}
	if !d.allowed && r.deny != nil && !back {
		// While tokens may still come back, a denial is not remembered:
		// the next request waits for them too.
		r.deny.record(keys, reqs, res, start, 0)
	}
	return d.allowed, nil
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

// late returns err, an error of decide for reqs at now, ready for
// AdmittedLocally.
func (r *Redis) late(err error, now time.Time, reqs []Request) error {
	var le *lateError
	if !errors.As(err, &le) {
		return err
	}
	return lateFor(le.err, le.call, now, reqs)
}

// clock returns the store's clock: ns since its epoch.
func (r *Redis) clock() int64 { return int64(r.now().Sub(r.epoch)) }

// redisKeys checks reqs and returns their Redis keys and tag, and whether
// one of them is a charge.
func redisKeys(reqs []Request) (keys []string, tag string, charges bool, err error) {
	keys = make([]string, len(reqs))
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		if p == nil {
			return nil, "", false, fmt.Errorf("limit: request for %q has no params", q.Key)
		}
		if err := p.Validate(); err != nil {
			if _, ok := Lookup(p.Algorithm); !ok {
				return nil, "", false, fmt.Errorf("%w %q", ErrUnknownAlgorithm, p.Algorithm)
			}
			return nil, "", false, fmt.Errorf("limit: key %q: %w", q.Key, err)
		}
		a, _ := Lookup(p.Algorithm)
		if _, ok := a.(RedisAlgorithm); !ok {
			return nil, "", false, fmt.Errorf("limit: algorithm %q has no Redis implementation", p.Algorithm)
		}
		t := redisTag(q)
		if i == 0 {
			tag = t
		} else if t != tag {
			return nil, "", false, fmt.Errorf("limit: keys %q and %q of one call have different tags %q and %q", reqs[0].Key, q.Key, tag, t)
		}
		keys[i] = redisKey(t, q.Key)
		charges = charges || q.Charge || q.Release
	}
	return keys, tag, charges, nil
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
}

// fromLeases decides reqs from the leases of keys if it can, and reports
// whether it admitted them. Otherwise it returns what the call to Redis
// should ask for, having waited, if another request was asking for the
// same leases, for that one's answer (start is then the new start). A
// request admitted from the last quarter of a lease asks for the next one
// in the background.
func (r *Redis) fromLeases(ctx context.Context, now time.Time, keys []string, reqs []Request, res []Result, tag string, start *int64) (bool, *leaseAsk, error) {
	n := len(reqs)
	ask := &leaseAsk{rates: make([]int64, n), have: make([]int64, n)}
	ok, claim, wait := r.leases.take(keys, reqs, res, *start, ask.rates, ask.have)
	if wait != nil {
		// Another request is asking for the lease this one needs: its
		// answer comes no later than this one's own would.
		select {
		case <-wait:
		case <-ctx.Done():
			return false, nil, fmt.Errorf("redis: %w", ctx.Err())
		}
		*start = r.clock()
		ok, claim, _ = r.leases.take(keys, reqs, res, *start, ask.rates, ask.have)
	}
	ask.claim = claim
	if ok {
		r.decisions.Add(1)
		if claim != nil {
			keys, reqs := slices.Clone(keys), slices.Clone(reqs)
			r.leases.bg.Go(func() { r.refill(now, keys, reqs, tag, ask) })
		}
	}
	return ok, ask, nil
}

// refill asks Redis for the next leases of reqs, whose claim ask holds:
// a call that counts no request, only tokens.
func (r *Redis) refill(now time.Time, keys []string, reqs []Request, tag string, ask *leaseAsk) {
	defer r.leases.release(ask.claim)
	for i := range ask.rates {
		ask.rates[i] = max(ask.rates[i], 1) // every token counted is leased
	}
	ask.refill = true
	args := r.scriptArgs(now, reqs, tag, ask)
	start := r.clock()
	ctx, cancel := context.WithTimeout(context.Background(), r.callTimeout)
	defer cancel()
	res := make([]Result, len(reqs))
	if d, err := r.decide(ctx, keys, reqs, args, res); err == nil && d.allowed {
		r.leases.grant(keys, reqs, res, d.grants, start, 0)
	}
}

// scriptArgs returns the script's arguments for reqs (redis.lua), with
// leases as ask says (nil: none).
func (r *Redis) scriptArgs(now time.Time, reqs []Request, tag string, ask *leaseAsk) []any {
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
		rate, fleet = slices.Min(ask.rates), max(r.fleetSize.Load(), 1)
		if ask.refill {
			rate = -rate
		}
	}
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		mode := byte('-')
		switch {
		case q.Charge:
			mode = 'c'
		case q.Release:
			mode = 'r'
		case q.Hold:
			mode = 'h'
		case q.Defer:
			mode = 'd'
		}
		var have int64
		if rate != 0 {
			have = ask.have[i]
		}
		args = append(args, scriptSettings(p))
		if units := q.units(); units == 1 && mode == '-' && !q.Shadow && rate == 0 {
			args = append(args, "")
		} else {
			b := make([]byte, 0, 48)
			b = strconv.AppendInt(b, units, 10)
			b = append(b, ' ', mode, ' ', '0', ' ')
			if q.Shadow {
				b[len(b)-2] = '1'
			}
			b = strconv.AppendInt(b, rate, 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, fleet, 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, have, 10)
			args = append(args, string(b))
		}
		if p.Calendar != "" {
			args = append(args, calendarArg(p, now))
		}
	}
	return r.budgetArgs(args, reqs, tag)
}

// scriptAnswer is Redis's answer to one script call.
type scriptAnswer struct {
	allowed bool
	// grants are the tokens leased for each limit; ages the time since
	// each limit's last lease of more than one token, -1 for none.
	grants     []leaseGrant
	ages       []time.Duration
	overflowed int64
}

// tokensMayComeBack reports whether every enforced limit that denied d's
// request had tokens leased within hold: gateways that stop using them
// give them back.
func (d *scriptAnswer) tokensMayComeBack(reqs []Request, res []Result, hold time.Duration) bool {
	some := false
	for i := range reqs {
		if res[i].Allowed || reqs[i].Shadow {
			continue
		}
		if d.ages[i] < 0 || d.ages[i] >= hold {
			return false
		}
		some = true
	}
	return some
}

// decide runs the script for keys and args on their node, through its
// breaker and batcher, and writes each limit's Result into res. When
// Redis does not decide, the error is a lateError if what became of the
// call is known or may become known (see lateCall).
func (r *Redis) decide(ctx context.Context, keys []string, reqs []Request, args []any, res []Result) (scriptAnswer, error) {
	d, late, err := r.decideOnce(ctx, keys, reqs, args, res)
	if err != nil && late != nil {
		err = &lateError{err: err, call: late}
	}
	return d, err
}

func (r *Redis) decideOnce(ctx context.Context, keys []string, reqs []Request, args []any, res []Result) (scriptAnswer, *lateCall, error) {
	n := len(reqs)
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	b, err := r.breakerFor(cctx, keys[0])
	if err != nil {
		return scriptAnswer{}, &lateCall{r: r, outcome: lateNotCounted}, err
	}
	ok, probe := b.allow()
	if !ok {
		r.reloadSlots()
		return scriptAnswer{}, &lateCall{r: r, outcome: lateNotCounted}, ErrCircuitOpen
	}
	var cr callResult
	if r.maxBatch > 1 {
		cr, err = r.batcherFor(b).do(cctx, r, keys, args)
	} else {
		cr, err = r.alone(cctx, keys, args)
	}
	v, shared, late := cr.v, cr.shared, cr.late
	if err != nil {
		if late == nil && (isScriptError(err) || isRedirect(err) || errors.Is(err, redis.ErrPoolTimeout)) {
			// Redis refused the call, or it was never sent.
			late = &lateCall{r: r, outcome: lateNotCounted}
		}
		switch {
		case shared:
			// Another call of the same round trip told the breaker.
			b.abandon(probe)
		case ctx.Err() != nil:
			// The caller went away: that says nothing about Redis.
			b.abandon(probe)
			return scriptAnswer{}, late, fmt.Errorf("redis: %w", ctx.Err())
		case errors.Is(err, redis.ErrPoolTimeout), isRedirect(err):
			// Every connection is busy (this process is short of
			// connections), or the key's slot has moved: the node is not
			// known to fail.
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
		return scriptAnswer{}, nil, fmt.Errorf("redis: script answered %d values for %d limits", len(v), n)
	}
	d := scriptAnswer{allowed: v[0] == 1, overflowed: v[len(v)-1],
		grants: make([]leaseGrant, n), ages: make([]time.Duration, n)}
	for i := range reqs {
		w := v[1+resultsPerLimit*i:]
		res[i] = Result{
			Allowed:    w[0] == 1,
			Limit:      reqs[i].Params.Limit,
			Remaining:  w[1],
			Reset:      time.Duration(w[2]) * time.Microsecond,
			RetryAfter: time.Duration(w[3]) * time.Microsecond,
		}
		d.grants[i] = leaseGrant{n: w[4], span: time.Duration(w[5]) * time.Microsecond, bucket: w[6]}
		d.ages[i] = -1
		if w[7] >= 0 {
			d.ages[i] = time.Duration(w[7]) * time.Microsecond
		}
	}
	return d, nil, nil
}
