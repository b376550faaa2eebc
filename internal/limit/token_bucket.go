package limit

import (
	_ "embed"
	"math"
	"time"
)

func init() {
	Register("token_bucket", tokenBucket{})
}

// maxWarmup is the longest warm-up a token_bucket may have. The coldness
// is computed in float64 nanoseconds; a day keeps it exact to well below
// a nanosecond.
const maxWarmup = 24 * time.Hour

// tokenBucket is the token_bucket algorithm (docs/algorithms.md, "Algorithms"
// section): a bucket of Burst tokens (default Limit) that refills
// at Limit per Window and starts full; each admitted request takes one.
// Guarantee: never more than Burst + rate·t admitted in any interval of
// length t. RetryAfter is the time until one token is back, Reset the
// time until the bucket is full. See gcra.go for the arithmetic.
//
// # Warm-up
//
// With Warmup > 0 it also does what Guava RateLimiter's SmoothWarmingUp
// does: a bucket that has been idle is cold, and a cold bucket charges
// more than one interval T = Window/Limit per request, so that the
// admitted rate ramps from a third of the rate to the full rate over the
// warm-up period. In Guava's terms, with w = Warmup:
//
//   - coldness x (Guava's storedPermits, in time: permits·T) builds up at
//     one nanosecond per nanosecond while the bucket is full, up to w, and
//     each admitted request spends T of it;
//   - spending coldness above w/2 (Guava's thresholdPermits) costs extra,
//     growing linearly from 0 at w/2 to 2T at w: a request that spends it
//     from x0 down to x1 pushes due back by T + G(x0) - G(x1), where
//     G(x) = 2·(x - w/2)²/w, rounded up to whole nanoseconds;
//   - a fresh bucket is full and cold (Guava starts at maxPermits).
//
// A saturated cold bucket therefore admits one request per 3T at first
// and one per T once it has spent w/2 of coldness, which takes w: Guava's
// numbers exactly when Burst is 1 (Guava's example, 5 per second with
// a 1.5s warm-up, waits 0.55s, 0.44s, 0.33s, 0.23s, then 0.2s; see
// TestTokenBucketWarmupSteps). With a larger Burst, the burst a cold
// bucket lets through shrinks in the same way, to about a third. Costs
// are never below T, so the guarantee above holds with a warm-up too.
type tokenBucket struct{}

func (tokenBucket) Validate(p *Params) error {
	if err := unread(p, SettingBurst|SettingWarmup); err != nil {
		return err
	}
	if p.Warmup < 0 {
		return settingErrorf("warmup", "warmup %s is negative", p.Warmup)
	}
	if p.Warmup > maxWarmup {
		return settingErrorf("warmup", "warmup %s is longer than %s", p.Warmup, maxWarmup)
	}
	return validateBucket(p)
}

func (tokenBucket) Reads() Setting { return SettingBurst | SettingWarmup }

func (tokenBucket) NewState(*Params) State { return &tbState{} }

// tbState is the state of one token_bucket counter. The bucket is full at
// due + dueF/den nanoseconds, where den is the Limit of the last counted
// request (0 for a fresh bucket: full and cold). With a warm-up, cold +
// coldF/den is the coldness as of due. The zero value is a fresh counter.
type tbState struct {
	due, cold   int64
	dueF, coldF uint32
	den         uint32
}

// view returns when the bucket is full and its coldness as of then, in
// p's denominator, and whether the bucket was never used.
func (s *tbState) view(p *Params) (due, cold rat, fresh bool) {
	if s.den == 0 {
		return rat{math.MinInt64, 0}, rat{int64(p.Warmup), 0}, true
	}
	return rescale(s.due, s.dueF, s.den, p.Limit), rescale(s.cold, s.coldF, s.den, p.Limit), false
}

// next returns due and the coldness after a request of k units at now:
// due moves k intervals on, and with a warm-up, spending k intervals of
// coldness from x0 costs G(x0) - G(x1) more (the extra costs of one unit
// at a time telescope).
func (s *tbState) next(now int64, p *Params, k int64) (due, cold rat) {
	due, cold, fresh := s.view(p)
	l, w := p.Limit, rat{int64(p.Warmup), 0}
	n := rat{now, 0}
	if due.cmp(n) <= 0 {
		// Full since due, and cooling since (Guava's resync).
		if !fresh && w.ns > 0 {
			cold = cold.add(n.sub(due, l), l)
		}
		due = n
	}
	cost, _ := intervals(k, p)
	if w.ns > 0 {
		x0 := cold
		if x0.cmp(w) > 0 {
			x0 = w
		}
		cold = x0.sub(cost, l)
		if cold.ns < 0 {
			cold = rat{}
		}
		cost.ns += warmCost(x0, l, w.ns) - warmCost(cold, l, w.ns)
	}
	return due.add(cost, l), cold
}

// warmCost returns G(x) = ⌈2·(x - w/2)²/w⌉ nanoseconds for x > w/2, else
// 0: what spending the coldness from x down to w/2 costs beyond one
// interval per request (the area between Guava's warm-up line and its
// stable interval). x is in denominator l.
func warmCost(x rat, l, w int64) int64 {
	d := x.float(l) - float64(w)/2
	if d <= 0 {
		return 0
	}
	// Squaring first keeps the result exact for round values (whole
	// milliseconds up to a few seconds): d² then fits in 53 bits.
	return int64(math.Ceil(2 * d * d / float64(w)))
}

func (s *tbState) Decide(now int64, p *Params, n int64) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	due, _, fresh := s.view(p)
	if r, ok := gcraCheck(due, fresh, now, p, n); !ok {
		return r
	}
	next, cold := s.next(now, p, n)
	d := next.sub(rat{now, 0}, p.Limit)
	// A warm-up cost can leave the bucket more than Burst intervals from
	// full: nothing is left then.
	remaining := max(capacity(p)-spans(d, p), 0)
	if p.Warmup > 0 && remaining > 0 {
		remaining = warmRemaining(d, cold, remaining, p)
	}
	return Result{
		Allowed:   true,
		Limit:     p.Limit,
		Remaining: remaining,
		Reset:     time.Duration(d.ceil()),
	}
}

// warmRemaining returns how many more requests a warming-up bucket admits
// at the instant it is d away from full with coldness x, at most most
// (what it would admit without a warm-up). The j-th of them finds the
// bucket d + (j-1)·T + G(x) - G(x - (j-1)·T) away from full — the extra
// costs telescope — and is admitted while that is at most (b-1)·T; that
// grows with j, so a binary search finds the last one.
func warmRemaining(d, x rat, most int64, p *Params) int64 {
	l, w := p.Limit, int64(p.Warmup)
	gx := warmCost(x, l, w)
	if gx == 0 {
		return most // warm: no extra costs ahead
	}
	tolerance, _ := intervals(capacity(p)-1, p)
	lo, hi := int64(0), most // lo is admitted
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		spent, _ := intervals(mid-1, p)
		xk := x.sub(spent, l)
		if xk.ns < 0 {
			xk = rat{}
		}
		debt := d.add(spent, l)
		debt.ns += gx - warmCost(xk, l, w)
		if debt.cmp(tolerance) <= 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// UncountedReset returns the time until the bucket is full; with a
// warm-up, it may still be warm then (Idle).
func (s *tbState) UncountedReset(now int64, p *Params) time.Duration {
	if r, ok := fixed(p); ok {
		return r.Reset
	}
	due, _, fresh := s.view(p)
	return untilDue(due, fresh, now)
}

func (s *tbState) Commit(now int64, p *Params, n int64) {
	if p.Limit <= 0 {
		return
	}
	due, cold := s.next(now, p, n)
	s.due, s.dueF = due.ns, uint32(due.frac)
	s.cold, s.coldF = cold.ns, uint32(cold.frac)
	s.den = uint32(p.Limit)
}

// Over returns the tokens owed below an empty bucket: how far due is
// past now, in intervals rounded up as Remaining is, beyond the
// capacity.
func (s *tbState) Over(now int64, p *Params) int64 {
	if p.Limit <= 0 {
		return 0
	}
	due, _, fresh := s.view(p)
	return bucketOver(due, fresh, now, p)
}

// Idle reports whether the bucket is full and, with a warm-up, fully cold.
func (s *tbState) Idle(now int64, p *Params) bool {
	if s.den == 0 {
		return true
	}
	den := int64(s.den)
	due, n := rat{s.due, int64(s.dueF)}, rat{now, 0}
	if due.cmp(n) > 0 {
		return false
	}
	if p.Warmup <= 0 {
		return true
	}
	cold := rat{s.cold, int64(s.coldF)}.add(n.sub(due, den), den)
	return cold.cmp(rat{int64(p.Warmup), 0}) >= 0
}

//go:embed token_bucket.lua
var tokenBucketLua string

// Lua implements RedisAlgorithm.
func (tokenBucket) Lua() string { return gcraLua + tokenBucketLua }
