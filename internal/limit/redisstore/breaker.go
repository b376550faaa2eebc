package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is the Redis store's circuit breaker. After threshold
// consecutive failures it opens: calls fail at once, adding no latency to
// requests during an outage. After a backoff it lets one call through as
// a probe; the probe's success closes it, its failure reopens it for twice
// the backoff, up to maxBackoff. A success of any call closes it.
//
// A closed breaker costs an atomic load per call and an atomic store per
// failure; only an open one takes its mutex. It is safe for concurrent
// use.
type breaker struct {
	threshold  int32
	base       time.Duration
	maxBackoff time.Duration
	now        func() time.Time
	// onChange, if not nil, is called with the new state on every
	// transition, with mu held so that calls come in order.
	onChange func(open bool)

	failures atomic.Int32 // consecutive failures while closed
	open     atomic.Bool

	mu      sync.Mutex
	until   time.Time     // no probe before this
	backoff time.Duration // the current open interval
	probing bool          // a probe is in flight
}

func newBreaker(threshold int, base, maxBackoff time.Duration, now func() time.Time, onChange func(bool)) *breaker {
	return &breaker{
		threshold:  int32(threshold),
		base:       base,
		maxBackoff: max(maxBackoff, base),
		now:        now,
		onChange:   onChange,
	}
}

// allow reports whether a call may go to Redis: always while closed; while
// open, only the one probe after the backoff. probe reports whether the
// call is that probe; the caller passes it on to failure or abandon.
func (b *breaker) allow() (ok, probe bool) {
	if !b.open.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true, false
	}
	if b.probing || b.now().Before(b.until) {
		return false, false
	}
	b.probing = true
	return true, true
}

// success records a call that Redis answered.
func (b *breaker) success() {
	if !b.open.Load() {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.Store(0)
	b.probing = false
	if b.open.Load() {
		b.open.Store(false)
		b.notify(false)
	}
}

// failure records a call that failed or timed out.
func (b *breaker) failure(probe bool) {
	if !b.open.Load() {
		if b.failures.Add(1) < b.threshold {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.open.Load() {
			b.backoff = b.base
			b.until = b.now().Add(b.backoff)
			b.probing = false
			b.open.Store(true)
			b.notify(true)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// While open, only the probe's failure counts: other calls that fail
	// now started before the breaker opened.
	if probe && b.probing {
		b.probing = false
		b.backoff = min(2*b.backoff, b.maxBackoff)
		b.until = b.now().Add(b.backoff)
	}
}

// abandon records a call that ended without telling anything about Redis
// (its caller went away): a probe may go again at once.
func (b *breaker) abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// probeNow lets the next call through as a probe, backoff or not.
func (b *breaker) probeNow() {
	if !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.until = time.Time{}
	b.mu.Unlock()
}

// isOpen reports whether the breaker is open.
func (b *breaker) isOpen() bool { return b.open.Load() }

func (b *breaker) notify(open bool) {
	if b.onChange != nil {
		b.onChange(open)
	}
}
