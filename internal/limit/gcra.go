package limit

import (
	"cmp"
	_ "embed"
	"math"
	"math/bits"
	"time"
)

// This file holds the arithmetic that token_bucket and leaky_bucket share.
//
// Both are GCRA, the generic cell rate algorithm (ITU-T I.371), in its
// virtual-scheduling form: a bucket of capacity b that refills (token
// bucket) or drains (leaky bucket) at Limit per Window is described by one
// instant, due, when it is back to full (or empty). Each admitted request
// pushes due back by the interval T = Window/Limit, and a request at now
// is admitted while due - (b-1)·T ≤ now: while at least one token is left,
// or the level is at most b-1. In any interval of length t, n admissions
// push due by n·T while it can run ahead of the clock by at most b·T, so
// n ≤ b + t/T: the guarantee in docs/algorithms.md, "Algorithms" table.
//
// T is rarely a whole number of nanoseconds (1s/3), and rounding it would
// make a bucket drift from its rate or its Retry-After lie by a
// nanosecond, so instants are exact rationals: ns + frac/Limit.

// rat is ns + frac/den nanoseconds, an instant or a duration, where den is
// the Limit of the bucket it belongs to and 0 ≤ frac < den.
type rat struct{ ns, frac int64 }

func (a rat) cmp(b rat) int {
	if c := cmp.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return cmp.Compare(a.frac, b.frac)
}

func (a rat) add(b rat, den int64) rat {
	r := rat{a.ns + b.ns, a.frac + b.frac}
	if r.frac >= den {
		r.ns++
		r.frac -= den
	}
	return r
}

func (a rat) sub(b rat, den int64) rat {
	r := rat{a.ns - b.ns, a.frac - b.frac}
	if r.frac < 0 {
		r.ns--
		r.frac += den
	}
	return r
}

// ceil returns the first whole nanosecond at or after a.
func (a rat) ceil() int64 {
	if a.frac > 0 {
		return a.ns + 1
	}
	return a.ns
}

func (a rat) float(den int64) float64 {
	return float64(a.ns) + float64(a.frac)/float64(den)
}

// ratMax returns the later of a and b.
func ratMax(a, b rat) rat {
	if a.cmp(b) >= 0 {
		return a
	}
	return b
}

// capacity returns the bucket capacity of p: Burst, or Limit when Burst
// is 0.
func capacity(p *Params) int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// intervals returns k·Window/Limit for k ≥ 0 and Limit ≥ 1: the time k
// requests take to refill or drain. It reports false, with a saturated
// value, when that is longer than maxSpan.
func intervals(k int64, p *Params) (rat, bool) {
	hi, lo := bits.Mul64(uint64(k), uint64(window(p)))
	l := uint64(p.Limit)
	if hi >= l {
		return rat{int64(maxSpan), 0}, false
	}
	q, r := bits.Div64(hi, lo, l)
	if q > uint64(maxSpan) {
		return rat{int64(maxSpan), 0}, false
	}
	return rat{int64(q), int64(r)}, true
}

// spans returns ⌈d·Limit/Window⌉ for d ≥ 0: the level, in requests, of a
// bucket that is d away from full (or empty).
func spans(d rat, p *Params) int64 {
	hi, lo := bits.Mul64(uint64(d.ns), uint64(p.Limit))
	lo, carry := bits.Add64(lo, uint64(d.frac), 0)
	hi += carry
	w := uint64(window(p))
	if hi >= w {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, w)
	if r > 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

// rescale returns ns + f/from as a rat with denominator to, rounded up:
// the Limit of a bucket changed (a reload) and its instants must be
// expressed in the new one. Rounding up keeps due no earlier than it was.
func rescale(ns int64, f, from uint32, to int64) rat {
	if f == 0 || int64(from) == to {
		return rat{ns, int64(f)}
	}
	n := (int64(f)*to + int64(from) - 1) / int64(from)
	if n >= to {
		return rat{ns + 1, n - to}
	}
	return rat{ns, n}
}

// gcraCheck decides a request of n units (1 ≤ n ≤ capacity) at now
// against a bucket whose debt runs until due: it is admitted while due -
// (b-n)·T ≤ now, when n tokens are left (x/time/rate's AllowN). It
// reports whether the bucket admits it, and the Result of a denial when
// it does not. fresh is a bucket that was never used.
func gcraCheck(due rat, fresh bool, now int64, p *Params, n int64) (Result, bool) {
	if fresh {
		return Result{}, true
	}
	// tolerance is (b-n)·T, within intervals' range once p is valid.
	tolerance, _ := intervals(capacity(p)-n, p)
	if due.cmp(rat{now + tolerance.ns, tolerance.frac}) <= 0 {
		return Result{}, true
	}
	// The first whole nanosecond t with due - tolerance ≤ t.
	retry := due.sub(tolerance, p.Limit).ceil()
	return Result{
		Limit:      p.Limit,
		Reset:      time.Duration(due.ceil() - now),
		RetryAfter: time.Duration(retry - now),
	}, false
}

// untilDue returns the time from now until due, the first whole
// nanosecond at or after it, or 0 when due is not after now: the time
// until a bucket is full (or empty) with nothing more counted. fresh is a
// bucket that was never used, whose due is not an instant.
func untilDue(due rat, fresh bool, now int64) time.Duration {
	if fresh || due.cmp(rat{now, 0}) <= 0 {
		return 0
	}
	return time.Duration(due.ceil() - now)
}

// bucketOver returns how far a bucket whose debt runs until due is past
// full (or empty) at now beyond its capacity, in requests rounded up as
// Remaining is: the units charges took past the limit (Result.Over).
func bucketOver(due rat, fresh bool, now int64, p *Params) int64 {
	if fresh || due.cmp(rat{now, 0}) <= 0 {
		return 0
	}
	return max(spans(due.sub(rat{now, 0}, p.Limit), p)-capacity(p), 0)
}

// validateBucket checks what token_bucket and leaky_bucket share: a
// capacity that fits in a counter and refills (or drains) in a time that
// fits next to an instant.
func validateBucket(p *Params) error {
	if p.Burst < 0 {
		return settingErrorf("burst", "burst %d is negative (0 means the limit)", p.Burst)
	}
	if p.Burst > MaxLimit {
		return settingErrorf("burst", "burst %d is above the maximum %d", p.Burst, int64(MaxLimit))
	}
	if p.Limit <= 0 {
		return nil // unlimited or blocked: no bucket
	}
	if _, ok := intervals(capacity(p), p); !ok {
		if p.Burst == 0 {
			return settingErrorf("unit", "unit %s is longer than 100 years", p.Window)
		}
		return settingErrorf("burst", "burst %d takes more than 100 years to refill at %d per %s; lower the burst or raise the limit",
			p.Burst, p.Limit, p.Window)
	}
	return nil
}

// gcraLua is the Lua of this file's arithmetic, which the Lua of
// token_bucket and leaky_bucket starts with: each chunk carries its own
// copy, which runs only when a call first uses that algorithm. Once, at
// the script's top level, it would run on every EVALSHA of a Redis
// Cluster, whatever the algorithm: 0.5-1.3µs of Redis's time a call
// (INFO commandstats, its ten functions alone against an empty script).
//
//go:embed gcra.lua
var gcraLua string
