package limit

import (
	_ "embed"
	"math"
	"time"
)

func init() {
	Register("sliding_window", slidingWindow{})
}

// slidingWindow is the sliding_window algorithm (docs/algorithms.md,
// "Algorithms" section): a ring of
// bucket counts, each bucket w = ⌈Window/Precision⌉ wide and aligned to the
// Unix epoch.
//
// The ring holds Precision+1 buckets, not Precision. A request at t in
// bucket b = ⌊t/w⌋ is admitted only if the buckets b-P..b hold fewer than
// Limit. Any closed interval of length Window that ends at t starts at or
// after t-Window ≥ b·w-P·w, so every admission inside it lies in buckets
// b-P..b and was counted: no interval of length Window ever holds more than
// Limit admissions. Summing only P buckets would let admissions at the end
// of bucket b-P and the start of bucket b — less than Window apart — be
// counted separately. The price is that a saturated key gets Limit per
// (P+1)·w rather than per Window: Limit·P/(P+1) per window as a long-run
// rate. It is not a floor for every single window, since admissions clump
// at the start of each (P+1)-bucket cycle (see TestSlidingWindowSteadyStream).
//
// Rounding w up (rather than down) keeps P·w ≥ Window, which the argument
// above needs when Precision does not divide Window.
type slidingWindow struct{}

func (slidingWindow) Validate(p *Params) error {
	if p.Precision < 1 || p.Precision > MaxPrecision {
		return settingErrorf("precision", "precision %d is outside 1..%d", p.Precision, MaxPrecision)
	}
	if p.Window/time.Duration(p.Precision) < time.Microsecond {
		return settingErrorf("unit", "unit %s split into %d buckets leaves less than 1µs per bucket; lower the precision or raise the unit",
			p.Window, p.Precision)
	}
	return unread(p, SettingPrecision)
}

func (slidingWindow) Reads() Setting { return SettingPrecision }

func (slidingWindow) NewState(p *Params) State {
	// Params are validated before use; the clamps only keep a caller that
	// skipped validation from dividing by zero or allocating without bound.
	prec := min(max(p.Precision, 1), MaxPrecision)
	// One allocation: the total and the Precision+1 bucket counts.
	return &swState{counts: make([]uint32, prec+2)}
}

// swWidth is the bucket width of p in nanoseconds, rounded up: rounding
// down would let an interval of one unit span one bucket more than the ring
// covers. It is derived from p, not stored: Identity keeps Window and
// Precision fixed for a state's life, and every byte of state is paid per
// key (the bytes per key in docs/algorithms.md, "Algorithms" section).
func swWidth(p *Params) int64 {
	prec := int64(min(max(p.Precision, 1), MaxPrecision))
	return max((window(p)+prec-1)/prec, 1)
}

// swState is the state of one sliding_window counter.
//
// counts holds the total, then the count of the head bucket, then the P =
// Precision older buckets, in one allocation: 32 bytes of state plus the
// counts keep a million keys in less memory than separate fields would.
// The head bucket has a slot of its own, so that counting into it —
// nearly every decision of a busy key — changes two counts and moves
// none; an older bucket j lives in slot j mod P of the older ones.
//
// Invariants: total is the sum of the P+1 bucket counts; when total > 0,
// the head slot holds the count of bucket head, which is not zero, and
// older slot j mod P holds the count of bucket j for head-P ≤ j < head.
// total exceeds the Limit only by charges (State.Commit), and saturates at
// the largest uint32.
type swState struct {
	// head is the newest bucket that was counted into.
	head   int64
	counts []uint32
}

// Indexes of counts.
const (
	swTotal = iota
	swHead
	swOld // the first of the older buckets
)

// older returns the counts of the P older buckets.
func (s *swState) older() []uint32 {
	return s.counts[swOld:]
}

// view returns the bucket b that now falls in and the count of buckets
// b-P..b. A now before the head bucket (a clock that stepped back) is
// treated as being in the head bucket: the counts stay where they are and
// the guarantee holds for the order in which requests are decided.
func (s *swState) view(now, width int64) (b int64, sum uint32) {
	total := s.counts[swTotal]
	if total != 0 && now < (s.head+1)*width {
		return s.head, total
	}
	b = floorDiv(now, width)
	if total == 0 {
		return b, 0
	}
	// b > head.
	old := s.older()
	p := int64(len(old))
	if b-s.head > p {
		return b, 0
	}
	sum = total
	// Moving the head to b retires buckets head-P..b-P-1, in the older
	// slots of head..b-1.
	for j := s.head; j < b; j++ {
		sum -= old[mod(j, p)]
	}
	return b, sum
}

func (s *swState) Decide(now int64, p *Params, cost int64) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	width := swWidth(p)
	limit := p.Limit
	b, sum := s.view(now, width)
	old := s.older()
	np := int64(len(old))
	n := np + 1
	if int64(sum)+cost <= limit {
		// Counted in bucket b, this request is the last to age out, at
		// the start of bucket b+n.
		return Result{Allowed: true, Limit: limit, Remaining: limit - int64(sum) - cost, Reset: time.Duration((b+n)*width - now)}
	}

	// Denied: sum > limit - cost ≥ 0, so the ring is not empty and
	// head ≤ b ≤ head+P. With no other traffic, moving to bucket b+k
	// retires bucket j = b+k-n, from b-P on; buckets after head hold
	// nothing. The request fits once enough have aged out. The head
	// bucket is never empty (Commit counts into it), so it holds the
	// newest requests: once it ages out, at head+n, everything has.
	reset := time.Duration((s.head+n)*width - now)
	res := Result{Limit: limit, Reset: reset, RetryAfter: reset}
	if int64(s.counts[swHead]) > limit-cost {
		// Only the head bucket aging out makes room: the common case of
		// a key denied in a burst.
		return res
	}
	left := int64(sum)
	slot := mod(b-np, np) // of bucket b-P
	for j := b - np; j < s.head; j++ {
		left -= int64(old[slot])
		if left+cost <= limit {
			res.RetryAfter = time.Duration((j+n)*width - now)
			return res
		}
		if slot++; slot == np {
			slot = 0
		}
	}
	return res
}

func (s *swState) UncountedReset(now int64, p *Params) time.Duration {
	if r, ok := fixed(p); ok {
		return r.Reset
	}
	width := swWidth(p)
	if _, sum := s.view(now, width); sum == 0 {
		return 0
	}
	// The head bucket is not empty and holds the newest requests: once
	// it ages out, everything has.
	return time.Duration((s.head+int64(len(s.older()))+1)*width - now)
}

func (s *swState) Commit(now int64, p *Params, cost int64) {
	if p.Limit < 0 {
		// Unlimited requests are not counted: nothing reads the counts,
		// and they could overflow 32 bits.
		return
	}
	width := swWidth(p)
	c := s.counts
	total := &c[swTotal]
	b := floorDiv(now, width)
	old := s.older()
	np := int64(len(old))
	switch {
	case *total == 0:
		// All slots are zero; any bucket may become the head.
	case b <= s.head:
		b = s.head
	case b-s.head > np:
		clear(c)
	default:
		// b > head: bucket j in head..b-1 takes the older slot of bucket
		// j-P, which ages out; head's count moves there, the others are
		// empty.
		i := mod(s.head, np)
		*total -= old[i]
		old[i] = c[swHead]
		for j := s.head + 1; j < b; j++ {
			i := mod(j, np)
			*total -= old[i]
			old[i] = 0
		}
		c[swHead] = 0
	}
	s.head = b
	add := uint32(min(cost, int64(math.MaxUint32-*total)))
	c[swHead] += add
	*total += add
}

// Over returns what the buckets a request at now is decided on hold
// beyond the limit: the count Decide compares with it.
func (s *swState) Over(now int64, p *Params) int64 {
	if p.Limit <= 0 {
		return 0
	}
	_, sum := s.view(now, swWidth(p))
	return max(int64(sum)-p.Limit, 0)
}

func (s *swState) Idle(now int64, p *Params) bool {
	return s.counts[swTotal] == 0 || floorDiv(now, swWidth(p))-s.head > int64(len(s.older()))
}

// floorDiv returns ⌊a/b⌋ for b > 0, also for a < 0 (instants before 1970).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// mod returns a mod n in 0..n-1 for n > 0.
func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}

//go:embed sliding_window.lua
var slidingWindowLua string

// Lua implements RedisAlgorithm.
func (slidingWindow) Lua() string { return slidingWindowLua }
