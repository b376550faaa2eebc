package limit

import (
	_ "embed"
	"math"
	"time"
)

func init() {
	Register("sliding_log", slidingLog{})
}

// MaxLogLimit is the largest limit a sliding_log rule may set: the log
// keeps 8 bytes per admitted request per key, so its memory is
// O(limit). Larger limits belong to sliding_window, whose memory does not
// grow with the limit.
const MaxLogLimit = 10_000

// slidingLog is the sliding_log algorithm (docs/algorithms.md, "Algorithms"
// section), the classic Redis sorted-set log kept in memory: the instants of the last Limit admissions. A
// request at now is admitted when fewer than Limit of them lie in the
// closed interval [now-Window, now], so no closed interval of length
// Window ever holds more than Limit admissions, and a request is denied
// only when one holds exactly Limit: the limit is exact, with no buckets
// to round to. An admission at a stops counting at a+Window+1ns, so
// RetryAfter is that instant for the oldest of the last Limit.
type slidingLog struct{}

func (slidingLog) Validate(p *Params) error {
	if err := unread(p, 0); err != nil {
		return err
	}
	if p.Limit > MaxLogLimit {
		return settingErrorf("limit", "limit %d is above %d, the most sliding_log keeps (it stores every admission: 8 bytes each, per key); use sliding_window for larger limits",
			p.Limit, MaxLogLimit)
	}
	return nil
}

func (slidingLog) Reads() Setting { return 0 }

func (slidingLog) NewState(p *Params) State {
	// The ring is sized to the limit once, so that no decision on an
	// existing key allocates. The clamp only protects callers that
	// skipped validation.
	return &slState{ts: make([]int64, min(max(p.Limit, 0), MaxLogLimit))}
}

// slState is the state of one sliding_log counter: a ring of the instants
// of the last len(ts) admissions, oldest first from head, n of them used.
// Instants are nondecreasing: a request decided at an instant before the
// newest one (a clock that stepped back) is counted at the newest.
//
// Decisions need only the last Limit admissions, but what a charge
// counts past the limit (Over) needs the older ones that still lie in
// the window: spill counts the admissions that fell out of a full ring
// while in the window, and spillAt is the instant of the newest of them.
// They are kept as one group that stops counting when its newest ages
// out, so that a key's state stays O(limit): exact when they share one
// instant (a charge on a full log), else counted a little longer than
// the oldest of them would be.
type slState struct {
	ts      []int64
	head    uint32
	n       uint32
	spill   uint32
	spillAt int64
}

// at returns the i-th instant from the oldest.
func (s *slState) at(i int) int64 {
	j := int(s.head) + i
	if j >= len(s.ts) {
		j -= len(s.ts)
	}
	return s.ts[j]
}

// view returns the instant a request at now is counted at, and the index
// (from the oldest) of the first admission among the last limit that
// still counts then: those from it on lie in [now-Window, now].
func (s *slState) view(now, limit, w int64) (at int64, first int) {
	n := int(s.n)
	if n == 0 {
		return now, 0
	}
	at = max(now, s.at(n-1))
	// Binary search for the first instant ≥ at-w among the last limit.
	lo, hi := n-int(min(int64(n), limit)), n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.at(mid) >= at-w {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return at, lo
}

func (s *slState) Decide(now int64, p *Params, n int64) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	w := window(p)
	at, first := s.view(now, p.Limit, w)
	counted := int64(int(s.n) - first)
	if counted+n <= p.Limit {
		// Counted at at, this request is the newest: everything has aged
		// out when it has.
		return Result{
			Allowed:   true,
			Limit:     p.Limit,
			Remaining: p.Limit - counted - n,
			Reset:     time.Duration(at + w + 1 - now),
		}
	}
	// Denied: counted > Limit - n ≥ 0. The request fits once the oldest
	// counted+n-Limit of the counted admissions have aged out.
	oldest := first + int(min(counted+n-p.Limit, counted)) - 1
	return Result{
		Limit:      p.Limit,
		Reset:      time.Duration(s.at(int(s.n)-1) + w + 1 - now),
		RetryAfter: time.Duration(s.at(oldest) + w + 1 - now),
	}
}

func (s *slState) UncountedReset(now int64, p *Params) time.Duration {
	if r, ok := fixed(p); ok {
		return r.Reset
	}
	if s.n == 0 {
		return 0
	}
	// Everything has aged out once the newest admission has.
	return time.Duration(max(s.at(int(s.n)-1)+window(p)+1-now, 0))
}

// Commit logs n admissions at the same instant. The ring keeps the last
// len(ts) of them: a charge past the limit shows as a full log of its
// instant, which denies until the instant has aged out, exactly as the
// whole charge would.
func (s *slState) Commit(now int64, p *Params, n int64) {
	if p.Limit < 0 {
		return
	}
	w := window(p)
	at, _ := s.view(now, p.Limit, w)
	if int64(len(s.ts)) < p.Limit {
		s.grow(int(min(p.Limit, MaxLogLimit)))
	}
	s.spillOut(at, w, n)
	for range min(n, int64(len(s.ts))) {
		if int(s.n) < len(s.ts) {
			s.n++
		} else {
			s.head++
			if int(s.head) == len(s.ts) {
				s.head = 0
			}
		}
		j := int(s.head) + int(s.n) - 1
		if j >= len(s.ts) {
			j -= len(s.ts)
		}
		s.ts[j] = at
	}
}

// spillOut adds to the spill (see slState) what counting n admissions
// at at pushes out of the ring while still in the window: its oldest
// admissions, and those of the n beyond the ring's size.
func (s *slState) spillOut(at, w, n int64) {
	if s.spill > 0 && s.spillAt < at-w {
		s.spill = 0 // aged out
	}
	size := int64(len(s.ts))
	drop := max(int64(s.n)+n-size, 0)
	if drop == 0 {
		return
	}
	old := min(drop, int64(s.n)) // the ring's oldest, 0..old-1
	first := s.first(0, int(old), at-w)
	in := old - int64(first) + (drop - old)
	if in == 0 {
		return
	}
	s.spill = uint32(min(int64(s.spill)+in, math.MaxUint32))
	if drop > old {
		s.spillAt = at
	} else {
		s.spillAt = s.at(int(old) - 1)
	}
}

// first returns the index of the first admission in lo..hi-1 (from the
// oldest) at or after since, or hi when there is none.
func (s *slState) first(lo, hi int, since int64) int {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.at(mid) >= since {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Over returns the admissions in the window of a request at now beyond
// the limit: those the ring holds there, and the spill while it counts.
func (s *slState) Over(now int64, p *Params) int64 {
	if p.Limit <= 0 || s.n == 0 {
		return 0
	}
	w := window(p)
	at := max(now, s.at(int(s.n)-1))
	count := int64(int(s.n) - s.first(0, int(s.n), at-w))
	if s.spill > 0 && s.spillAt >= at-w {
		count += int64(s.spill)
	}
	return max(count-p.Limit, 0)
}

// grow resizes the ring to size, keeping the admissions in order. It runs
// only after a reload raised the limit.
func (s *slState) grow(size int) {
	ts := make([]int64, size)
	for i := range int(s.n) {
		ts[i] = s.at(i)
	}
	s.ts, s.head = ts, 0
}

func (s *slState) Idle(now int64, p *Params) bool {
	return s.n == 0 || s.at(int(s.n)-1)+window(p) < now
}

//go:embed sliding_log.lua
var slidingLogLua string

// Lua implements RedisAlgorithm.
func (slidingLog) Lua() string { return slidingLogLua }
