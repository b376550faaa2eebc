package limit

import (
	_ "embed"
	"math"
	"time"
)

func init() {
	Register("leaky_bucket", leakyBucket{})
}

// leakyBucket is the leaky_bucket algorithm (docs/algorithms.md, "Algorithms"
// section) as a meter: every admitted request pours one unit into a bucket of
// capacity Burst (default Limit) that leaks Limit per Window; a request is
// admitted if the level plus it fits, level+1 ≤ capacity. It starts empty.
//
// A meter decides; it does not queue or delay requests, so as a meter the
// leaky bucket admits exactly what a token bucket of the same capacity
// and rate admits (its level is the token bucket's missing tokens). It is
// kept as its own strategy for the rule files that name it, and it has no
// warm-up. Guarantee: never more than capacity + rate·t in any interval of
// length t. See gcra.go for the arithmetic.
type leakyBucket struct{}

func (leakyBucket) Validate(p *Params) error {
	if err := unread(p, SettingBurst); err != nil {
		return err
	}
	return validateBucket(p)
}

func (leakyBucket) Reads() Setting { return SettingBurst }

func (leakyBucket) NewState(*Params) State { return &lbState{} }

// lbState is the state of one leaky_bucket counter: the bucket is empty at
// due + dueF/den nanoseconds, where den is the Limit of the last counted
// request (0 for a fresh, empty bucket). The level at now is
// (due - now)·Limit/Window while due > now. The zero value is a fresh
// counter.
type lbState struct {
	due  int64
	dueF uint32
	den  uint32
}

// empty returns when the bucket is empty, in p's denominator, and whether
// it was never used.
func (s *lbState) empty(p *Params) (rat, bool) {
	if s.den == 0 {
		return rat{math.MinInt64, 0}, true
	}
	return rescale(s.due, s.dueF, s.den, p.Limit), false
}

// next returns when the bucket is empty after a request of k units at
// now: k intervals later than when it is empty now.
func (s *lbState) next(now int64, p *Params, k int64) rat {
	due, _ := s.empty(p)
	t, _ := intervals(k, p)
	return ratMax(due, rat{now, 0}).add(t, p.Limit)
}

func (s *lbState) Decide(now int64, p *Params, n int64) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	due, fresh := s.empty(p)
	if r, ok := gcraCheck(due, fresh, now, p, n); !ok {
		return r
	}
	d := s.next(now, p, n).sub(rat{now, 0}, p.Limit)
	return Result{
		Allowed:   true,
		Limit:     p.Limit,
		Remaining: max(capacity(p)-spans(d, p), 0),
		Reset:     time.Duration(d.ceil()),
	}
}

func (s *lbState) UncountedReset(now int64, p *Params) time.Duration {
	if r, ok := fixed(p); ok {
		return r.Reset
	}
	due, fresh := s.empty(p)
	return untilDue(due, fresh, now)
}

func (s *lbState) Commit(now int64, p *Params, n int64) {
	if p.Limit <= 0 {
		return
	}
	due := s.next(now, p, n)
	s.due, s.dueF, s.den = due.ns, uint32(due.frac), uint32(p.Limit)
}

// Over returns the level above a full bucket.
func (s *lbState) Over(now int64, p *Params) int64 {
	if p.Limit <= 0 {
		return 0
	}
	due, fresh := s.empty(p)
	return bucketOver(due, fresh, now, p)
}

func (s *lbState) Idle(now int64, _ *Params) bool {
	return s.den == 0 || s.due < now || s.due == now && s.dueF == 0
}

//go:embed leaky_bucket.lua
var leakyBucketLua string

// Lua implements RedisAlgorithm.
func (leakyBucket) Lua() string { return gcraLua + leakyBucketLua }
