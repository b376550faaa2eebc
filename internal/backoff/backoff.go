// Package backoff computes the waits between the attempts of a retry loop:
// exponential, capped, with full jitter (each wait is drawn uniformly
// between zero and the exponential ceiling), so that clients that failed
// together do not all come back together ("Exponential Backoff And
// Jitter", AWS Architecture Blog, 2015).
//
// It only computes durations: it must not sleep, read the clock or decide
// whether to retry; the loop that uses it does that, so that the waits can
// be checked without time passing.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Defaults of Backoff.
const (
	DefaultBase = 100 * time.Millisecond
	DefaultMax  = 10 * time.Second
)

// Backoff gives the waits of one retry loop. Its zero value waits between
// 0 and DefaultBase first, doubling the ceiling after each wait up to
// DefaultMax. It is not safe for concurrent use; give each loop its own.
type Backoff struct {
	// Base is the ceiling of the first wait. Default DefaultBase.
	Base time.Duration
	// Max bounds the ceiling. Default DefaultMax; set to Base or more.
	Max time.Duration
	// Rand draws the waits; nil uses math/rand/v2's global source. Tests
	// set a seeded one.
	Rand *rand.Rand

	ceiling time.Duration // of the next wait; 0 before the first
}

// Next returns the wait before the next attempt, uniform in
// [0, ceiling], and doubles the ceiling, up to Max.
func (b *Backoff) Next() time.Duration {
	base, limit := b.Base, b.Max
	if base <= 0 {
		base = DefaultBase
	}
	if limit <= 0 {
		limit = DefaultMax
	}
	limit = max(limit, base)
	if b.ceiling <= 0 {
		b.ceiling = base
	}
	c := min(b.ceiling, limit)
	if b.ceiling < limit {
		b.ceiling = min(2*b.ceiling, limit)
	}
	n := int64(c) + 1
	if b.Rand != nil {
		return time.Duration(b.Rand.Int64N(n))
	}
	return time.Duration(rand.Int64N(n))
}

// Reset starts the waits again from Base, after an attempt succeeded.
func (b *Backoff) Reset() { b.ceiling = 0 }
