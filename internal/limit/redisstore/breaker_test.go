package redisstore

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
)

// fakeClock is a settable clock for the breaker and the deny cache.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestBreaker runs the breaker through an outage on a fake clock: it opens
// after the threshold, fails fast, probes once per backoff (doubling up to
// the cap), and closes on the probe's success.
func TestBreaker(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	type step struct {
		at        time.Duration
		op        string // allow, fail, succeed, abandon
		probe     bool   // for fail and abandon: the call was the probe
		wantAllow bool   // for allow
		wantProbe bool   // for allow
		wantOpen  bool   // after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "opens after three failures, probes, closes",
			steps: []step{
				{op: "fail"},
				{op: "fail"},
				{op: "allow", wantAllow: true},
				{op: "fail", wantOpen: true},
				{at: 1 * ms, op: "allow", wantOpen: true},
				{at: 99 * ms, op: "allow", wantOpen: true},
				{at: 100 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				// One probe at a time.
				{at: 100 * ms, op: "allow", wantOpen: true},
				{at: 101 * ms, op: "succeed"},
				{at: 101 * ms, op: "allow", wantAllow: true},
			},
		},
		{
			name: "failed probes double the backoff up to the cap",
			steps: []step{
				{op: "fail"}, {op: "fail"}, {op: "fail", wantOpen: true},
				{at: 100 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				{at: 100 * ms, op: "fail", probe: true, wantOpen: true},
				{at: 299 * ms, op: "allow", wantOpen: true},
				{at: 300 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				{at: 300 * ms, op: "fail", probe: true, wantOpen: true},
				{at: 699 * ms, op: "allow", wantOpen: true},
				{at: 700 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				{at: 700 * ms, op: "fail", probe: true, wantOpen: true},
				// Capped at 500ms.
				{at: 1199 * ms, op: "allow", wantOpen: true},
				{at: 1200 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				{at: 1200 * ms, op: "succeed"},
				// Closed again: the next outage starts from the base backoff.
				{at: 1300 * ms, op: "fail"}, {at: 1300 * ms, op: "fail"}, {at: 1300 * ms, op: "fail", wantOpen: true},
				{at: 1400 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
			},
		},
		{
			name: "a success resets the count",
			steps: []step{
				{op: "fail"}, {op: "fail"}, {op: "succeed"}, {op: "fail"}, {op: "fail"},
				{op: "allow", wantAllow: true},
				{op: "fail", wantOpen: true},
			},
		},
		{
			name: "late failures of calls sent before opening do not extend it",
			steps: []step{
				{op: "fail"}, {op: "fail"}, {op: "fail", wantOpen: true},
				{at: 50 * ms, op: "fail", wantOpen: true},
				{at: 100 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
			},
		},
		{
			name: "an abandoned probe lets the next call probe",
			steps: []step{
				{op: "fail"}, {op: "fail"}, {op: "fail", wantOpen: true},
				{at: 100 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
				{at: 101 * ms, op: "abandon", probe: true, wantOpen: true},
				{at: 101 * ms, op: "allow", wantAllow: true, wantProbe: true, wantOpen: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{t: limittest.T0}
			var changes []bool
			b := newBreaker(3, 100*time.Millisecond, 500*time.Millisecond, clock.now, func(open bool) { changes = append(changes, open) })
			wasOpen := false
			for i, s := range tt.steps {
				clock.t = limittest.T0.Add(s.at)
				switch s.op {
				case "allow":
					ok, probe := b.allow()
					if ok != s.wantAllow || probe != s.wantProbe {
						t.Errorf("step %d (+%v): allow: got %v probe %v, want %v probe %v", i, s.at, ok, probe, s.wantAllow, s.wantProbe)
					}
				case "fail":
					b.failure(s.probe)
				case "succeed":
					b.success()
				case "abandon":
					b.abandon(s.probe)
				}
				if got := b.isOpen(); got != s.wantOpen {
					t.Errorf("step %d (+%v) %s: open: got %v, want %v", i, s.at, s.op, got, s.wantOpen)
				}
				if b.isOpen() != wasOpen {
					if len(changes) == 0 || changes[len(changes)-1] != b.isOpen() {
						t.Errorf("step %d: the transition to open=%v was not reported: %v", i, b.isOpen(), changes)
					}
					wasOpen = b.isOpen()
				}
			}
		})
	}
}
