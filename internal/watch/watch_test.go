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

// TestSettle checks that a file written in two parts, with a pause longer
// than the debounce between them, is reported once, whole: the watcher
// reports it only once it has stayed the same for the settle time.
func TestSettle(t *testing.T) {
	t.Parallel()
	const wait, settle = 100 * time.Millisecond, 500 * time.Millisecond
	half, whole := fileState{exists: true, size: 10, mtime: 1}, fileState{exists: true, size: 20, mtime: 2}
	type step struct {
		write   *fileState // the file becomes this, with an event
		advance time.Duration
		calls   int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "written at once", steps: []step{
			{write: &whole},
			{advance: wait, calls: 0},
			{advance: settle - time.Millisecond, calls: 0},
			{advance: time.Millisecond, calls: 1},
		}},
		{name: "two halves 300ms apart", steps: []step{
			{write: &half},
			{advance: 300 * time.Millisecond, calls: 0}, // looked at after 100ms: half
			{write: &whole},
			{advance: wait, calls: 0}, // looked at again: changed
			{advance: settle, calls: 1},
		}},
		{name: "quiet after one write", steps: []step{
			{write: &half},
			{advance: wait},
			{advance: settle / 2},
			{write: nil},
			{advance: settle / 2, calls: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{}
			var mu sync.Mutex
			var file fileState
			calls, got := 0, []fileState{}
			d := &debouncer{clock: clock, wait: wait, settle: settle,
				stat: func() fileState { mu.Lock(); defer mu.Unlock(); return file },
				f:    func() { calls++; mu.Lock(); got = append(got, file); mu.Unlock() }}
			for i, s := range tt.steps {
				if s.write != nil {
					mu.Lock()
					file = *s.write
					mu.Unlock()
					d.trigger()
				}
				clock.advance(s.advance)
				if calls != s.calls {
					t.Fatalf("step %d: calls %d, want %d", i, calls, s.calls)
				}
			}
			for _, f := range got {
				if f == half && tt.name == "two halves 300ms apart" {
					t.Errorf("reported the half-written file")
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
