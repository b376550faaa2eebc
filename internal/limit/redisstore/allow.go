package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Allow implements Store, with Memory.Allow's semantics, on Redis's clock:
// now, the gateway's clock, only places the calendar windows that the
// script chooses from (a calendar unit, Params.Calendar), and must be
// within a window of Redis's clock; the deny cache and the breaker use
// Config.Now.
// It returns ErrCircuitOpen while the breaker is open, and an error when
// Redis fails or does not answer within the timeout; a caller's own
// cancellation is returned as such and does not count as a failure.
//
// The requests must share a Tag (Request.Tag); a key named twice is
// counted twice (limit.AllowMerged). A
// request with an Overflow key is counted against it when its own key is
// new and the database holds the key budget (Config.MaxKeys).
//
// A request that Redis denies while other gateways may hold leased tokens
// of its limits waits up to LeaseWait for them to come back (docs/fleet.md,
// "Leases") and is decided again.
func (r *Store) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (allowed bool, err error) {
	if len(res) < len(reqs) {
		return false, fmt.Errorf("limit: %d results for %d requests", len(res), len(reqs))
	}
	if len(reqs) == 0 {
		return true, nil
	}
	if len(reqs) > 1 && limit.Repeats(reqs) {
		return limit.AllowMerged(ctx, now, reqs, res, r.allow)
	}
	return r.allow(ctx, now, reqs, res)
}

// allow is Allow for requests of distinct counters: it takes from the
// leases of its limits and asks only for what they lack (withLeases,
// lease.go), or, when its limits do not lease, asks (ask.go: the deny
// cache, else Redis) and remembers a denial Redis made (remember).
func (r *Store) allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	c := &call{r: r, now: now, reqs: reqs, res: res, fullReqs: reqs, full: res}
	var err error
	if c.keys, c.tag, c.mustAsk, err = redisKeys(reqs); err != nil {
		return false, err
	}
	c.start = r.clock()
	if r.leases != nil && r.fixedNow == nil && leasable(reqs) {
		d, err := c.withLeases(ctx)
		return d.allowed, err
	}
	d, err := c.ask(ctx)
	if err != nil {
		return false, err
	}
	c.remember(d)
	return d.allowed, nil
}

// remember keeps a denial Redis made in the deny cache (denycache.go),
// so that the next requests of its keys are denied without a call; a
// call with leases remembers it before it ends (withLeases), so that the
// requests that waited for its answer find it. While
// tokens may still come back, it is not remembered: the next request
// waits for them too; nor for leaseCacheHold after a lease: a gateway
// starved of CPU may still hold tokens then, and a remembered denial
// would go on denying after they came back.
func (c *call) remember(d scriptAnswer) {
	r := c.r
	if d.allowed || !d.decided || r.deny == nil || c.mayComeBack(d, max(r.leaseWait+r.leases.idleOr0(), leaseCacheHold)) {
		return
	}
	r.deny.record(c.keys, c.reqs, c.res, c.start, 0)
}

// leaseCacheHold is how long after a lease of a limit a denial by it is
// not kept in the deny cache.
const leaseCacheHold = time.Second

// mayComeBack reports whether tokens of the limits that denied d may
// come back: not for a charge, which Redis counts whatever it decides.
func (c *call) mayComeBack(d scriptAnswer, hold time.Duration) bool {
	return !c.mustAsk && d.tokensMayComeBack(c.reqs, c.res, hold)
}

// tokensMayComeBack reports whether every enforced limit that denied d's
// request had tokens leased within hold: gateways that stop using them
// give them back.
func (d *scriptAnswer) tokensMayComeBack(reqs []limit.Request, res []limit.Result, hold time.Duration) bool {
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

// call is one Allow on its way through the steps that decide it: from
// leases, from the deny cache, or by Redis.
type call struct {
	r   *Store
	now time.Time
	// keys, reqs and res are the limits still to decide: all of them,
	// or those fromLeases and spendSome found no token for. fullReqs and
	// full are all of the call's.
	keys     []string
	reqs     []limit.Request
	res      []limit.Result
	fullReqs []limit.Request
	full     []limit.Result
	tag      string
	mustAsk  bool  // a charge, a release, a wait or a read is among reqs: it must reach Redis
	start    int64 // the store's clock when the call began (or last waited)
	// The call's leases (lease.go): what it asks of them (nil:
	// nothing), and the tokens it took from some.
	lease      *leaseAsk
	taken      []*tokenLease // the leases spendSome took a token from
	rest       []int         // the indexes of reqs in fullReqs, once narrowed
	spentSome  bool
	claimAsked bool
}

// clock returns the store's clock: ns since its epoch.
func (r *Store) clock() int64 { return int64(r.now().Sub(r.epoch)) }

// redisKeys checks reqs and returns their Redis keys and tag, and whether
// one of them must reach Redis: a charge, a release, a wait, or a read
// (of what Redis holds, which a cached denial does not say).
func redisKeys(reqs []limit.Request) (keys []string, tag string, mustAsk bool, err error) {
	keys = make([]string, len(reqs))
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		if p == nil {
			return nil, "", false, fmt.Errorf("limit: request for %q has no params", q.Key)
		}
		if err := p.Validate(); err != nil {
			if _, ok := limit.Lookup(p.Algorithm); !ok {
				return nil, "", false, fmt.Errorf("%w %q", limit.ErrUnknownAlgorithm, p.Algorithm)
			}
			return nil, "", false, fmt.Errorf("limit: key %q: %w", q.Key, err)
		}
		a, _ := limit.Lookup(p.Algorithm)
		if _, ok := a.(limit.RedisAlgorithm); !ok {
			return nil, "", false, fmt.Errorf("limit: algorithm %q has no Redis implementation", p.Algorithm)
		}
		t := redisTag(q)
		if i == 0 {
			tag = t
		} else if t != tag {
			return nil, "", false, fmt.Errorf("limit: keys %q and %q of one call have different tags %q and %q", reqs[0].Key, q.Key, tag, t)
		}
		keys[i] = redisKey(t, q.Key)
		mustAsk = mustAsk || q.Follows() || q.Wait > 0 || q.Act == limit.Read
	}
	return keys, tag, mustAsk, nil
}

// redisTag returns q's tag: Tag, or Key up to its first "|".
func redisTag(q *limit.Request) string {
	if q.Tag != "" {
		return q.Tag
	}
	if i := strings.IndexByte(q.Key, '|'); i >= 0 {
		return q.Key[:i]
	}
	return q.Key
}

// redisKey returns the Redis key of the counter key with tag:
// "gw:{tag}:rest" when key is tag + "|" + rest (an app's keys:
// "gw:{app-1}:/v1/user"), else "gw:{tag}|key" (a per-IP key:
// "gw:{*|203.0.113.7}|*|/|203.0.113.7"). The separator after the tag tells
// the two forms apart, so distinct keys never share a Redis key. Redis
// Cluster places the key by the tag between the braces.
func redisKey(tag, key string) string {
	if len(key) > len(tag) && key[len(tag)] == '|' && key[:len(tag)] == tag {
		return "gw:{" + tag + "}:" + key[len(tag)+1:]
	}
	return "gw:{" + tag + "}|" + key
}
