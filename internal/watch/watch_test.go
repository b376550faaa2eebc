package watch

import (
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fakeClock runs AfterFunc callbacks when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Duration
	f       func()
	stopped bool
	fired   bool
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now + d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// advance moves the clock and runs, in order, the callbacks that fall due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped && !t.fired && t.at <= c.now {
			t.fired = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at < due[j].at })
	for _, t := range due {
		t.f()
	}
}

func TestDebounce(t *testing.T) {
	t.Parallel()
	type step struct {
		trigger bool
		advance time.Duration
		calls   int // total calls after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "one event", steps: []step{
			{trigger: true, calls: 0},
			{advance: 99 * time.Millisecond, calls: 0},
			{advance: time.Millisecond, calls: 1},
			{advance: time.Hour, calls: 1},
		}},
		{name: "a burst is one reload", steps: []step{
			{trigger: true},
			{advance: 50 * time.Millisecond},
			{trigger: true},
			{advance: 50 * time.Millisecond},
			{trigger: true},
			{advance: 99 * time.Millisecond, calls: 0},
			{advance: time.Millisecond, calls: 1},
		}},
		{name: "two bursts are two reloads", steps: []step{
			{trigger: true},
			{advance: 100 * time.Millisecond, calls: 1},
			{trigger: true, calls: 1},
			{trigger: true, calls: 1},
			{advance: 100 * time.Millisecond, calls: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{}
			calls := 0
			d := &debouncer{clock: clock, wait: 100 * time.Millisecond, f: func() { calls++ }}
			for i, s := range tt.steps {
				if s.trigger {
					d.trigger()
				}
				clock.advance(s.advance)
				if calls != s.calls {
					t.Fatalf("step %d (%+v): calls %d, want %d", i, s, calls, s.calls)
				}
			}
		})
	}
}

func TestDebounceStop(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	calls := 0
	d := &debouncer{clock: clock, wait: 100 * time.Millisecond, f: func() { calls++ }}
	d.trigger()
	d.stop()
	clock.advance(time.Second)
	if calls != 0 {
		t.Errorf("calls after stop: got %d, want 0", calls)
	}
}

func TestWatcherRelevantEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := &Watcher{path: filepath.Join(dir, "rules.yaml"), dir: dir, base: "rules.yaml", target: "/elsewhere/real.yaml"}
	tests := []struct {
		name string
		ev   fsnotify.Event
		want bool
	}{
		{"write to the file", fsnotify.Event{Name: filepath.Join(dir, "rules.yaml"), Op: fsnotify.Write}, true},
		{"rename onto the file", fsnotify.Event{Name: filepath.Join(dir, "rules.yaml"), Op: fsnotify.Create}, true},
		{"removal", fsnotify.Event{Name: filepath.Join(dir, "rules.yaml"), Op: fsnotify.Remove}, true},
		{"chmod only", fsnotify.Event{Name: filepath.Join(dir, "rules.yaml"), Op: fsnotify.Chmod}, false},
		{"editor swap file", fsnotify.Event{Name: filepath.Join(dir, ".rules.yaml.swp"), Op: fsnotify.Write}, false},
		{"other file", fsnotify.Event{Name: filepath.Join(dir, "other.yaml"), Op: fsnotify.Write}, false},
		{"kubernetes ..data swap", fsnotify.Event{Name: filepath.Join(dir, "..data"), Op: fsnotify.Create}, true},
		{"symlink target written", fsnotify.Event{Name: "/elsewhere/real.yaml", Op: fsnotify.Write}, true},
		{"file of the same name elsewhere", fsnotify.Event{Name: "/elsewhere/rules.yaml", Op: fsnotify.Write}, false},
	}
	for _, tt := range tests {
		if got := w.relevant(tt.ev); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
