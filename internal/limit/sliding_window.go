package limit

import (
	_ "embed"
	"fmt"
	"time"
)

func init() {
	Register("sliding_window", slidingWindow{})
}

// slidingWindow is the sliding_window algorithm (DESIGN §5): a ring of
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
		return fmt.Errorf("precision %d is outside 1..%d", p.Precision, MaxPrecision)
	}
	if p.Window/time.Duration(p.Precision) < time.Microsecond {
		return fmt.Errorf("unit %s split into %d buckets leaves less than 1µs per bucket; lower the precision or raise the unit",
			p.Window, p.Precision)
	}
	return unread(p, SettingPrecision)
}

func (slidingWindow) Reads() Setting { return SettingPrecision }

func (slidingWindow) NewState(p *Params) State {
	// Params are validated before use; the clamps only keep a caller that
	// skipped validation from dividing by zero or allocating without bound.
	prec := min(max(p.Precision, 1), MaxPrecision)
	// One allocation: the Precision+1 bucket counts, then the total.
	return &swState{counts: make([]uint32, prec+2)}
}

// swWidth is the bucket width of p in nanoseconds, rounded up: rounding
// down would let an interval of one unit span one bucket more than the ring
// covers. It is derived from p, not stored: Identity keeps Window and
// Precision fixed for a state's life, and a state this small keeps more
// keys in memory (DESIGN §6 memory store; issue 7's bytes per key).
func swWidth(p *Params) int64 {
	prec := int64(min(max(p.Precision, 1), MaxPrecision))
	return max((window(p)+prec-1)/prec, 1)
}

// swState is the state of one sliding_window counter.
//
// Invariants, with counts and total as ring returns them: total is the sum
// of counts; when total > 0, counts[j mod n] holds the count of bucket j
// for head-n < j ≤ head, where n = len(counts) = Precision+1, and the head
// bucket's count is not zero.
// total never exceeds the largest Limit it was checked against, so it fits
// in 32 bits (MaxLimit).
type swState struct {
	// head is the newest bucket that was counted into.
	head int64
	// counts is the ring of Precision+1 bucket counts followed by their
	// total, in one allocation: 32 bytes of state plus the ring keep a
	// million keys in less memory than separate fields would.
	counts []uint32
}

// ring returns the bucket counts and a pointer to their total.
func (s *swState) ring() ([]uint32, *uint32) {
	n := len(s.counts) - 1
	return s.counts[:n], &s.counts[n]
}

// view returns the bucket b that now falls in and the count of buckets
// b-P..b. A now before the head bucket (a clock that stepped back) is
// treated as being in the head bucket: the counts stay where they are and
// the guarantee holds for the order in which requests are decided.
func (s *swState) view(now, width int64) (b int64, sum uint32) {
	b = floorDiv(now, width)
	counts, total := s.ring()
	if *total == 0 {
		return b, 0
	}
	if b < s.head {
		b = s.head
	}
	n := int64(len(counts))
	if b-s.head >= n {
		return b, 0
	}
	sum = *total
	// Bucket j shares its slot with bucket j-n, which has aged out at b.
	for j := s.head + 1; j <= b; j++ {
		sum -= counts[mod(j, n)]
	}
	return b, sum
}

func (s *swState) Decide(now int64, p *Params) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	limit := p.Limit
	width := swWidth(p)
	b, sum := s.view(now, width)
	counts, _ := s.ring()
	n := int64(len(counts))
	if int64(sum) < limit {
		// Counted in bucket b, this request is the last to age out, at
		// the start of bucket b+n.
		return Result{
			Allowed:   true,
			Limit:     limit,
			Remaining: limit - int64(sum) - 1,
			Reset:     time.Duration((b+n)*width - now),
		}
	}

	// Denied: sum ≥ limit ≥ 1, so the ring is not empty and
	// head ≤ b < head+n. Walk forward bucket by bucket (no other traffic)
	// until enough old buckets have aged out for one more request to fit.
	// Moving to bucket b+k retires bucket b+k-n; buckets after head hold
	// nothing. At k = n everything has aged out, so the loop always sets
	// RetryAfter.
	res := Result{
		Limit: limit,
		// The head bucket is never empty (Commit counts into it), so it
		// holds the newest requests.
		Reset: time.Duration((s.head+n)*width - now),
	}
	left := int64(sum)
	for k := int64(1); k <= n; k++ {
		if j := b + k - n; j <= s.head {
			left -= int64(counts[mod(j, n)])
		}
		if left < limit {
			res.RetryAfter = time.Duration((b+k)*width - now)
			break
		}
	}
	return res
}

func (s *swState) Commit(now int64, p *Params) {
	if p.Limit < 0 {
		// Unlimited requests are not counted: nothing reads the counts,
		// and they could overflow 32 bits.
		return
	}
	b := floorDiv(now, swWidth(p))
	counts, total := s.ring()
	n := int64(len(counts))
	switch {
	case *total == 0:
		// All slots are zero; any bucket may become the head.
	case b <= s.head:
		b = s.head
	case b-s.head >= n:
		clear(counts)
		*total = 0
	default:
		for j := s.head + 1; j <= b; j++ {
			i := mod(j, n)
			*total -= counts[i]
			counts[i] = 0
		}
	}
	s.head = b
	counts[mod(b, n)]++
	*total++
}

func (s *swState) Idle(now int64, p *Params) bool {
	counts, total := s.ring()
	return *total == 0 || floorDiv(now, swWidth(p))-s.head >= int64(len(counts))
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
