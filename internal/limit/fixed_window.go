package limit

import (
	_ "embed"
	"math"
	"time"
)

func init() {
	Register("fixed_window", fixedWindow{})
}

// fixedWindow is the fixed_window algorithm (docs/algorithms.md, "Algorithms"
// section), the plain counter: one count per window, the windows aligned to multiples of
// Window since the Unix epoch, or to the calendar (Params.Calendar), so
// that every gateway and every key agree on where a window starts.
//
// It never admits more than Limit in one aligned window, but it forgets
// everything at a window's end: Limit admissions just before a boundary
// and Limit just after it put 2×Limit within an instant of each other
// (the boundary problem of fixed windows). That is its documented price
// for 16 bytes a key.
type fixedWindow struct{}

func (fixedWindow) Validate(p *Params) error { return unread(p, 0) }

func (fixedWindow) Reads() Setting { return 0 }

func (fixedWindow) NewState(*Params) State { return &fwState{} }

// fwState is the state of one fixed_window counter: count requests were
// counted in window win (see span). The zero value is a fresh counter.
// count exceeds the Limit only by charges (State.Commit), and saturates
// at the largest uint32.
type fwState struct {
	win   int64
	count uint32
}

// span returns the window of p that now falls in, and its end: window
// number win is [win·Window, (win+1)·Window); with a calendar unit, win is
// the window's start (calendarSpan).
func span(now int64, p *Params) (win, end int64) {
	if p.Calendar != "" {
		return calendarSpan(now, p)
	}
	w := window(p)
	win = floorDiv(now, w)
	return win, (win + 1) * w
}

// view returns the window that now falls in, its end, and what was
// counted in it. A now before the counted window (a clock that stepped
// back) is treated as being in it, as sliding_window does.
func (s *fwState) view(now int64, p *Params) (win, end, count int64) {
	win, end = span(now, p)
	switch {
	case s.count == 0 || win > s.win:
		return win, end, 0
	case win < s.win:
		win = s.win
		if p.Calendar != "" {
			_, end = calendarSpan(win, p)
		} else {
			end = (win + 1) * window(p)
		}
	}
	return win, end, int64(s.count)
}

func (s *fwState) Decide(now int64, p *Params, n int64) Result {
	if r, ok := fixed(p); ok {
		return r
	}
	_, e, count := s.view(now, p)
	// The window's end is when the count is forgotten: it is both when the
	// counter is fully replenished and, for a denied request, the first
	// instant it would be admitted.
	end := time.Duration(e - now)
	if count+n <= p.Limit {
		return Result{Allowed: true, Limit: p.Limit, Remaining: p.Limit - count - n, Reset: end}
	}
	return Result{Limit: p.Limit, Reset: end, RetryAfter: end}
}

func (s *fwState) UncountedReset(now int64, p *Params) time.Duration {
	if r, ok := fixed(p); ok {
		return r.Reset
	}
	_, end, count := s.view(now, p)
	if count == 0 {
		return 0
	}
	return time.Duration(end - now)
}

func (s *fwState) Commit(now int64, p *Params, n int64) {
	if p.Limit < 0 {
		return
	}
	win, _, count := s.view(now, p)
	s.win, s.count = win, uint32(min(count+n, math.MaxUint32))
}

func (s *fwState) Over(now int64, p *Params) int64 {
	if p.Limit <= 0 {
		return 0
	}
	_, _, count := s.view(now, p)
	return max(count-p.Limit, 0)
}

func (s *fwState) Idle(now int64, p *Params) bool {
	win, _ := span(now, p)
	return s.count == 0 || win > s.win
}

//go:embed fixed_window.lua
var fixedWindowLua string

// Lua implements RedisAlgorithm.
func (fixedWindow) Lua() string { return fixedWindowLua }
