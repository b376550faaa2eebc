// Package logthrottle keeps a message that can repeat on every request
// (a store that fails) from flooding the log: at most one per interval.
//
// It only decides whether to log: it must not log, read the clock (the
// caller passes the instant) or count what it suppressed.
package logthrottle

import (
	"sync/atomic"
	"time"
)

// DefaultEvery is the interval of a Throttle whose Every is zero.
const DefaultEvery = time.Second

// Throttle lets one message through per interval. Its zero value lets
// through at most one a second. It is safe for concurrent use: of
// callers racing in the same interval, one is let through.
type Throttle struct {
	// Every is the interval; zero means DefaultEvery. Set it before use.
	Every time.Duration

	last atomic.Int64 // UnixNano of the last message let through; 0 for none
}

// Allow reports whether a message may be logged at now, and if so counts
// now as the last one.
func (t *Throttle) Allow(now time.Time) bool {
	every := t.Every
	if every <= 0 {
		every = DefaultEvery
	}
	n, last := now.UnixNano(), t.last.Load()
	if last != 0 && n-last < int64(every) {
		return false
	}
	return t.last.CompareAndSwap(last, n)
}
