// Package eventually waits, in tests, for a condition that becomes true
// asynchronously: a reload that lands, a server that comes back.
//
// It is for tests only. It must not stand in for a sleep or a timing
// assertion: it waits for a condition the test states, with a generous
// deadline, and what can be made to happen synchronously must not use it.
package eventually

import (
	"fmt"
	"testing"
	"time"
)

// poll is the pause between two checks of a condition.
const poll = 10 * time.Millisecond

// True checks cond until it returns true, and fails t with the message
// built from format and args if it has not within timeout. The timeout
// only bounds a hang: make it generous (seconds), never a measure of
// speed, so that the test passes on a loaded machine.
func True(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(poll)
	}
}
