// Package gwtest holds what the tests of the request path, the server and
// replay share: a fixed instant, a settable clock and the rules most of
// them run; and a log that goroutines write while a test reads it (Log),
// which the tests of other packages use too.
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

// Log is what goroutines write (a logger, a process's output) while a
// test reads it. Its zero value is ready; it is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	b  []byte
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *Log) WriteString(s string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, s...)
	return len(s), nil
}

// String returns everything written.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// Tail returns the last n bytes written, or all when fewer.
func (l *Log) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b[max(len(l.b)-n, 0):])
}
