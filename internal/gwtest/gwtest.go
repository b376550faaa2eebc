// Package gwtest holds what the tests of the request path, the server and
// replay share: a fixed instant, a settable clock and the rules most of
// them run.
//
// It is for tests only and must not be imported by code the gateway runs;
// it must not read the wall clock: time in tests is a parameter.
package gwtest

import (
	_ "embed"
	"sync"
	"time"
)

// T0 is an instant aligned to every window the tests use.
var T0 = time.Unix(1_700_000_000, 0)

// BasicRules are the rules most tests use: two apps with totals, method,
// unlimited, blocked and shadow rules, and a "*" section.
//
//go:embed basic-rules.yaml
var BasicRules string

// Clock is a clock a test sets. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the time the clock was set to.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
