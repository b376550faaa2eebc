// Package watch calls a function when a file changes, however it is
// replaced: written in place, renamed over, or swapped through a symlink
// (Kubernetes ConfigMap and Secret volumes). The gateway watches its rule
// file and its TLS certificate pair with it.
//
// It only reports that a file may have changed: it must not parse
// or validate what the file holds; the caller does that.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long the watcher waits after the last event of a
// burst before it reloads: an editor's save is several events (write temp,
// rename, chmod), a Kubernetes ConfigMap update a few more.
const DefaultDebounce = 100 * time.Millisecond

// DefaultSettle is how long the file must stay unchanged (size and
// modification time) after a burst of writes before the watcher reports
// it, so that a file written in parts is not reported half-written while
// its writer pauses for less than this. A writer that pauses longer is
// reported at its pause: only a write-and-rename (docs/sources.md,
// "Reloading rules") is never seen half-written, whatever the writer's
// speed. A burst without a write to the file (a file renamed over it, a
// Kubernetes ConfigMap's symlink swap) is reported at once, after the
// debounce: what it brings in is already whole.
const DefaultSettle = 2 * time.Second

// Clock is what the watcher needs of time. Tests pass a fake so that the
// debounce logic runs on fixed instants, without sleeping.
type Clock interface {
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop reports whether it stopped the call before it ran.
	Stop() bool
}

type realClock struct{}

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Config configures a Watcher.
type Config struct {
	// Path is the watched file. Required.
	Path string
	// OnChange is called after each burst of changes to the file, from
	// a timer goroutine. Required.
	OnChange func()
	// Debounce is the quiet time that ends a burst. Default
	// DefaultDebounce.
	Debounce time.Duration
	// Settle is how long the file must then stay unchanged before
	// OnChange is called, after a burst that wrote to the file. Default
	// DefaultSettle; negative means no wait.
	Settle time.Duration
	// Clock schedules the debounced call. Default: the real clock.
	Clock Clock
	// Logger receives watch errors. Default slog.Default().
	Logger *slog.Logger
}

// Watcher calls OnChange when the file changes, however it changes:
// written in place, replaced by a rename (how most editors save), deleted
// and re-created, or swapped through a symlink (how Kubernetes updates a
// ConfigMap volume: the file is a symlink into a "..data" directory link
// that is replaced atomically).
//
// It watches the directory holding the file, never the file itself: a
// watch on a file is lost when the file is replaced. When the file is a
// symlink it also watches the directory of the symlink's current target,
// re-resolved on every event, so that edits to the target are seen too.
type Watcher struct {
	path     string // absolute
	dir      string // directory of path, always watched
	base     string
	log      *slog.Logger
	fs       *fsnotify.Watcher
	debounce *debouncer

	target    string // resolved path of the file, "" if unresolvable
	targetDir string // extra watched directory, "" if none
}

// New starts watching. Call Run to deliver events and Close when
// done.
func New(cfg Config) (*Watcher, error) {
	if cfg.Path == "" || cfg.OnChange == nil {
		return nil, errors.New("watch: New needs Path and OnChange")
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Debounce < 0 {
		return nil, fmt.Errorf("config: negative debounce %s", cfg.Debounce)
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	abs, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", cfg.Path, err)
	}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", cfg.Path, err)
	}
	w := &Watcher{
		path:     abs,
		dir:      filepath.Dir(abs),
		base:     filepath.Base(abs),
		log:      cfg.Logger,
		fs:       fs,
		debounce: &debouncer{clock: cfg.Clock, wait: cfg.Debounce, settle: cfg.Settle, f: cfg.OnChange},
	}
	if err := fs.Add(w.dir); err != nil {
		fs.Close()
		return nil, fmt.Errorf("watching directory %s: %w", w.dir, err)
	}
	w.debounce.stat = func() fileState { return statFile(abs) }
	w.resolve()
	return w, nil
}

// Run delivers events until ctx is done or the watcher is closed.
func (w *Watcher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			w.debounce.stop()
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				w.debounce.stop()
				return
			}
			if w.relevant(ev) {
				w.resolve()
				// Only a write can leave the file half-written: a file
				// renamed in, or a ConfigMap's symlink swapped, is whole
				// when it appears.
				w.debounce.trigger(ev.Has(fsnotify.Write))
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			// An overflowed event queue may have dropped our event:
			// reload to be sure.
			w.log.Warn("file watch error; reloading to be safe", "path", w.path, "err", err)
			w.debounce.trigger(true)
		}
	}
}

// Close stops watching.
func (w *Watcher) Close() error {
	w.debounce.stop()
	return w.fs.Close()
}

// relevant reports whether ev may have changed what Path reads.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	dir, name := filepath.Split(ev.Name)
	dir = filepath.Clean(dir)
	switch {
	case dir == w.dir && name == w.base:
		return true
	case dir == w.dir && strings.HasPrefix(name, ".."):
		// Kubernetes' atomic writer: "..data" and "..<timestamp>".
		return true
	case w.target != "" && ev.Name == w.target:
		return true
	}
	return false
}

// resolve re-resolves the symlink chain of the file and watches the
// directory of its target.
func (w *Watcher) resolve() {
	target, err := filepath.EvalSymlinks(w.path)
	if err != nil {
		// Gone for now (deleted, or mid-swap); the directory watch will
		// see it come back.
		return
	}
	w.target = target
	dir := filepath.Dir(target)
	if dir == w.dir || dir == w.targetDir {
		return
	}
	if w.targetDir != "" {
		w.fs.Remove(w.targetDir) // it may already be gone with its directory
		w.targetDir = ""
	}
	if err := w.fs.Add(dir); err != nil {
		w.log.Warn("cannot watch the symlink target directory of a watched file", "dir", dir, "err", err)
		return
	}
	w.targetDir = dir
}

// fileState is what tells a file changed without reading it.
type fileState struct {
	exists bool
	size   int64
	mtime  int64 // nanoseconds since the Unix epoch
}

func statFile(path string) fileState {
	fi, err := os.Stat(path)
	if err != nil {
		return fileState{}
	}
	return fileState{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

// debouncer calls f once, wait after the last of a burst of triggers, and
// then, when a trigger of the burst was a write, only once the file has
// stayed the same (stat) for settle: a writer that pauses between two
// parts of a file triggers once per part, and the first part alone must
// not be loaded.
type debouncer struct {
	clock  Clock
	wait   time.Duration
	settle time.Duration // < 0: no settling
	stat   func() fileState
	f      func()

	mu      sync.Mutex
	timer   Timer
	last    fileState // the file when it was last looked at
	checked bool      // last holds a look of this burst
	wrote   bool      // a trigger since f last ran was a write
}

// trigger starts or extends a burst; wrote reports whether the event was
// a write to the file, which can leave it half-written.
func (d *debouncer) trigger(wrote bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wrote = d.wrote || wrote
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = d.clock.AfterFunc(d.wait, d.fire)
}

// fire runs when a burst has been quiet for wait, and then after each
// settle: it calls f once the file looks as it did a settle ago.
func (d *debouncer) fire() {
	d.mu.Lock()
	if d.settle > 0 && d.stat != nil && d.wrote {
		st := d.stat()
		if !d.checked || st != d.last {
			d.last, d.checked = st, true
			d.timer = d.clock.AfterFunc(d.settle, d.fire)
			d.mu.Unlock()
			return
		}
	}
	d.checked, d.wrote = false, false
	d.mu.Unlock()
	d.f()
}

func (d *debouncer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
