package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxTimeout is the longest a request waits for Redis by default
// (Config.MaxTimeout): the wait adapts to Redis's round trips, from
// Timeout up to this.
const DefaultMaxTimeout = 250 * time.Millisecond

// rtt is how long a request waits for Redis's decision before its fail
// mode decides it: an estimate of Redis's round trip from the round
// trips that got an answer, late ones included, kept as TCP keeps its
// retransmission timeout (RFC 6298, section 2: a smoothed round trip
// and its mean deviation, with gains 1/8 and 1/4, the wait their sum
// with four deviations), but at least twice the smoothed round trip
// (a steady Redis has a deviation of next to nothing, and a loaded
// gateway's scheduling then makes round trips late that are not;
// RFC 6298 has a floor of a second for the same reason), bounded by
// floor (Config.Timeout) and ceiling (Config.MaxTimeout). A Redis that answers in 30–80ms is so waited for,
// not taken for failed (docs/fleet.md, "When Redis fails"), while one
// that answers in a millisecond and then hangs fails after floor. When
// floor is ceiling, the wait is fixed and observe does nothing.
//
// It is safe for concurrent use; wait is an atomic load.
type rtt struct {
	floor, ceiling time.Duration
	timeout        atomic.Int64

	mu           sync.Mutex
	seen         bool
	srtt, rttvar time.Duration
}

func newRTT(floor, ceiling time.Duration) *rtt {
	e := &rtt{floor: floor, ceiling: max(ceiling, floor)}
	e.timeout.Store(int64(floor))
	return e
}

// adapts reports whether the wait adapts: floor is not ceiling.
func (e *rtt) adapts() bool { return e.floor != e.ceiling }

// wait returns how long a request waits for Redis's answer now.
func (e *rtt) wait() time.Duration { return time.Duration(e.timeout.Load()) }

// observe records a round trip that Redis answered after d.
func (e *rtt) observe(d time.Duration) {
	if !e.adapts() || d < 0 {
		return
	}
	e.mu.Lock()
	if !e.seen {
		e.seen, e.srtt, e.rttvar = true, d, d/2
	} else {
		dev := e.srtt - d
		if dev < 0 {
			dev = -dev
		}
		e.rttvar += (dev - e.rttvar) / 4
		e.srtt += (d - e.srtt) / 8
	}
	w := min(max(e.srtt+4*e.rttvar, 2*e.srtt, e.floor), e.ceiling)
	e.mu.Unlock()
	e.timeout.Store(int64(w))
}
