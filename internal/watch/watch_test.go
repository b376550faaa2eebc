package watch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
					d.trigger(true)
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
// reports it only once it has stayed the same for the settle time. A file
// renamed in (or swapped through a symlink) is whole when it appears: it
// is reported after the debounce alone, unless the burst also wrote.
func TestSettle(t *testing.T) {
	t.Parallel()
	const wait, settle = 100 * time.Millisecond, 500 * time.Millisecond
	half, whole := fileState{exists: true, size: 10, mtime: 1}, fileState{exists: true, size: 20, mtime: 2}
	type step struct {
		write   *fileState // the file becomes this, with an event
		swap    bool       // the event is a rename or a symlink swap, not a write
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
		{name: "renamed in: no settle", steps: []step{
			{write: &whole, swap: true},
			{advance: wait - time.Millisecond, calls: 0},
			{advance: time.Millisecond, calls: 1},
		}},
		{name: "written, then renamed over: settles", steps: []step{
			{write: &half},
			{write: &whole, swap: true},
			{advance: wait, calls: 0},
			{advance: settle, calls: 1},
		}},
		{name: "renamed in, then written: settles", steps: []step{
			{write: &whole, swap: true},
			{advance: wait, calls: 1},
			{write: &half, calls: 1},
			{advance: wait, calls: 1},
			{advance: settle, calls: 2},
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
					d.trigger(!s.swap)
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
	d.trigger(true)
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

// scheduleClock is a fakeClock that tells the test each time the watcher
// schedules a call, so that the test advances time only once the watcher
// has taken in a file event.
type scheduleClock struct {
	fakeClock
	scheduled chan struct{}
}

func (c *scheduleClock) AfterFunc(d time.Duration, f func()) Timer {
	t := c.fakeClock.AfterFunc(d, f)
	c.scheduled <- struct{}{}
	return t
}

// TestWatcherFileWrittenInTwoParts runs the real watcher (fsnotify on a
// real file) on a fake clock: a writer keeps the rule file open and writes
// it in two parts with a pause between them. A pause shorter than the
// settle time is never reported half-written, however long it is against
// the debounce (the watcher once reported the first part after 600ms); a
// pause longer than the settle time reports the first part, as docs/sources.md
// says ("Reloading rules": write and rename to be safe from any pause).
func TestWatcherFileWrittenInTwoParts(t *testing.T) {
	t.Parallel()
	const (
		debounce = 100 * time.Millisecond
		first    = "configs:\n  - appId: app-1\n"
		second   = "    limits:\n      - api: /\n        limit: 5\n"
	)
	tests := []struct {
		name   string
		settle time.Duration // Config.Settle: 0 is DefaultSettle
		pause  time.Duration // fake time between the two parts
		want   []string      // what each report read
	}{
		{name: "default settle, pause of 1.5s", pause: 1500 * time.Millisecond, want: []string{first + second}},
		{name: "default settle, pause just under it", pause: debounce + DefaultSettle - time.Millisecond, want: []string{first + second}},
		{name: "settle 5s, pause of 4s", settle: 5 * time.Second, pause: 4 * time.Second, want: []string{first + second}},
		{name: "default settle, pause longer than it", pause: debounce + DefaultSettle, want: []string{first, first + second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "rules.yaml")
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			settle := tt.settle
			if settle == 0 {
				settle = DefaultSettle
			}
			clock := &scheduleClock{scheduled: make(chan struct{}, 16)}
			var got []string // appended by OnChange, which runs in clock.advance
			w, err := New(Config{Path: path, Debounce: debounce, Settle: tt.settle, Clock: clock, OnChange: func() {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("reading the reported file: %v", err)
				}
				got = append(got, string(data))
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); w.Run(ctx) }()
			defer func() { cancel(); <-done; w.Close() }()

			// write appends one part with one write(2), one fsnotify
			// Write event, and waits for the watcher to take it in.
			write := func(part string) {
				t.Helper()
				if _, err := f.WriteString(part); err != nil {
					t.Fatal(err)
				}
				select {
				case <-clock.scheduled:
				case <-time.After(time.Minute): // anti-hang bound, not a wait
					t.Fatal("the watcher saw no event of the write")
				}
			}
			// advance moves the fake clock in steps of the debounce, so
			// that the watcher's own timers fall due in order.
			advance := func(d time.Duration) {
				for step := debounce; d > 0; d -= step {
					step = min(step, d)
					clock.advance(step)
				}
			}
			drain := func() {
				for {
					select {
					case <-clock.scheduled:
					default:
						return
					}
				}
			}

			write(first)
			advance(tt.pause)
			drain()
			write(second)
			advance(debounce + 2*settle)
			if !slices.Equal(got, tt.want) {
				t.Errorf("reports: got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWatcherSwapNeedsNoSettle runs the real watcher (fsnotify on real
// files) on a fake clock: a file renamed over the watched one, and a
// Kubernetes ConfigMap update (a new "..timestamp" directory, and the
// "..data" symlink swapped to it), are whole when they appear, and are
// reported after the debounce, well before the settle that in-place
// writes wait for.
func TestWatcherSwapNeedsNoSettle(t *testing.T) {
	t.Parallel()
	const (
		debounce = 100 * time.Millisecond
		settle   = 10 * time.Second
		before   = "configs: []\n"
		after    = "configs:\n  - appId: app-1\n"
	)
	// Each setup lays out the directory, returns the watched path and
	// the swap that brings in after.
	rename := func(t *testing.T, dir string) (string, func()) {
		path := filepath.Join(dir, "rules.yaml")
		writeTestFile(t, path, before)
		return path, func() {
			tmp := filepath.Join(dir, ".rules.yaml.tmp")
			writeTestFile(t, tmp, after)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	configMap := func(t *testing.T, dir string) (string, func()) {
		// dir/rules.yaml → ..data/rules.yaml, ..data → ..2026_01 (as
		// the kubelet's atomic writer lays out a ConfigMap volume).
		writeTestFile(t, filepath.Join(dir, "..2026_01", "rules.yaml"), before)
		symlink(t, "..2026_01", filepath.Join(dir, "..data"))
		symlink(t, filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml"))
		return filepath.Join(dir, "rules.yaml"), func() {
			writeTestFile(t, filepath.Join(dir, "..2026_02", "rules.yaml"), after)
			symlink(t, "..2026_02", filepath.Join(dir, "..data_tmp"))
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "..2026_01")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) (string, func())
	}{{"rename", rename}, {"configmap swap", configMap}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, swap := tc.setup(t, t.TempDir())
			clock := &scheduleClock{scheduled: make(chan struct{}, 64)}
			var got []string // appended by OnChange, which runs in clock.advance
			w, err := New(Config{Path: path, Debounce: debounce, Settle: settle, Clock: clock, OnChange: func() {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("reading the reported file: %v", err)
				}
				got = append(got, string(data))
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); w.Run(ctx) }()
			defer func() { cancel(); <-done; w.Close() }()

			swap()
			select {
			case <-clock.scheduled:
			case <-time.After(time.Minute): // anti-hang bound, not a wait
				t.Fatal("the watcher saw no event of the swap")
			}
			// Fake time, in steps of the debounce, up to the settle: a
			// swap is reported within it.
			var advanced time.Duration
			for len(got) == 0 && advanced < settle {
				clock.advance(debounce)
				advanced += debounce
			}
			if len(got) == 0 || got[len(got)-1] != after {
				t.Fatalf("reports after %s of fake time: got %q, want the swapped-in file %q before the %s settle", advanced, got, after, settle)
			}
			t.Logf("reported after %s of fake time", advanced)
		})
	}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
