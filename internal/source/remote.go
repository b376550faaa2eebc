package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// Defaults of a store source.
const (
	// DefaultTimeout bounds one request to the store.
	DefaultTimeout = 5 * time.Second
	// DefaultProbeInterval is how often Watch checks that the store
	// answers and that it has missed no change.
	DefaultProbeInterval = 5 * time.Second
	// maxBackoff bounds the wait before watching again after a watch
	// failed.
	maxBackoff = 10 * time.Second
)

// remote is what a store source (etcd, ZooKeeper) keeps besides its
// client: its status, its rules cache, and what Watch last told of. Its
// methods are safe for concurrent use.
//
// A stamp identifies one value of the key: it changes with every write,
// and is 0 when the key does not exist (an etcd mod revision, a znode's
// mzxid).
type remote struct {
	name      string // the URL, for messages
	flags     string // the prefix of the store's flags: "etcd", "zk"
	key       string
	maxBytes  int64
	cacheFile string
	timeout   time.Duration
	probe     time.Duration
	log       *slog.Logger

	mu     sync.Mutex
	status Status
	// loaded reports whether a load has succeeded (from the store or
	// the cache): only a first load falls back to the cache.
	loaded bool
	// notified is the stamp Watch last told of, so that it never
	// reports the same value twice.
	notified int64
	// cached is the stamp last written to the cache file.
	cached int64
}

func newRemote(cfg Config, flags, key string) *remote {
	return &remote{
		name: cfg.Spec, flags: flags, key: key, maxBytes: cfg.MaxBytes, cacheFile: cfg.CacheFile,
		timeout: cmpOr(cfg.Timeout, DefaultTimeout), probe: cmpOr(cfg.ProbeInterval, DefaultProbeInterval),
		log: cfg.Logger.With("source", cfg.Spec), status: Status{Source: cfg.Spec, Since: time.Now()},
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Status reports the connection's state and the version in force.
func (r *remote) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// setConnected records whether the store answered, logging changes.
func (r *remote) setConnected(ok bool, err error) (was bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was = r.status.Connected
	if ok != was {
		r.status.Since = time.Now()
		if ok {
			r.log.Info("rule store reachable")
		} else {
			r.log.Warn("rule store unreachable; keeping the rules in force and retrying", "err", err)
		}
	}
	r.status.Connected, r.status.Error = ok, ""
	if err != nil {
		r.status.Error = err.Error()
	}
	return was
}

// load reads the key with get, which returns its value and stamp, and
// parses it with Parse. When the store cannot be reached on the first
// load, it falls back to the cache file, if there is one.
func (r *remote) load(ctx context.Context, get func(context.Context) (Value, int64, error)) (*config.Rules, string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	v, stamp, err := get(ctx)
	if err != nil {
		r.setConnected(false, err)
		r.mu.Lock()
		first := !r.loaded
		r.mu.Unlock()
		if first && r.cacheFile != "" {
			return r.loadCache(err)
		}
		hint := ""
		switch {
		case !first:
		case attemptOf(err) == refused:
			// The store is up and refuses this client: no cache helps
			// for long, the certificates are to be mended.
			hint = fmt.Sprintf("; check --%[1]s-ca (what signed the store's certificate), and --%[1]s-cert and --%[1]s-key (this gateway's, if the store asks for one)", r.flags)
		default:
			hint = "; pass --rules-cache FILE to start from the last rules read when the store is down"
		}
		return nil, "", fmt.Errorf("reading rules from %s: %w%s", r.name, err, hint)
	}
	r.setConnected(true, nil)
	if v.Version == NoVersion {
		return nil, "", fmt.Errorf("%s: the key %s does not exist; write the rules there (gateway rules push)", r.name, r.key)
	}
	if int64(len(v.Data)) > r.maxBytes {
		return nil, "", fmt.Errorf("%s: the value is larger than %d bytes (--max-rules-bytes); the rules in force stay", r.name, r.maxBytes)
	}
	rules, err := Parse(r.name, r.key, v.Data)
	if err != nil {
		return nil, "", err
	}
	version := strconv.FormatInt(v.Version, 10)
	r.mu.Lock()
	r.loaded, r.notified = true, stamp
	r.status.Version, r.status.FromCache = version, false
	writeCache := r.cacheFile != "" && r.cached != stamp
	r.mu.Unlock()
	if writeCache {
		if err := writeFileAtomic(r.cacheFile, v.Data); err != nil {
			r.log.Error("cannot write the rules cache", "path", r.cacheFile, "err", err)
		} else {
			r.mu.Lock()
			r.cached = stamp
			r.mu.Unlock()
		}
	}
	return rules, version, nil
}

// loadCache parses the cache file, the store being unreachable (cause).
func (r *remote) loadCache(cause error) (*config.Rules, string, error) {
	data, err := safefile.Read(r.cacheFile, r.maxBytes)
	if err != nil {
		return nil, "", fmt.Errorf("reading rules from %s: %w; and the rules cache: %w", r.name, cause, err)
	}
	rules, err := Parse(r.cacheFile, r.key, data)
	if err != nil {
		return nil, "", fmt.Errorf("reading rules from %s: %w; and the rules cache is not valid: %w", r.name, cause, err)
	}
	r.log.Warn("rule store unreachable at start; serving the rules cache until it answers", "cache", r.cacheFile, "err", cause)
	r.mu.Lock()
	r.loaded = true
	r.status.Version, r.status.FromCache = "cache", true
	r.mu.Unlock()
	return rules, "cache", nil
}

// writeFileAtomic writes data to path through a temporary file renamed
// over it, so that a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// probeEvery calls check every probe interval, and whenever kick
// receives, until ctx is done; it returns a channel closed once it
// stopped.
func (r *remote) probeEvery(ctx context.Context, kick <-chan struct{}, check func(context.Context)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.probe)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-kick:
			}
			check(ctx)
		}
	}()
	return done
}

// check asks the store for the key's stamp with stampOf, and calls
// onChange if it changed or if the store answers again.
func (r *remote) check(ctx context.Context, stampOf func(context.Context) (int64, error), onChange func()) {
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	stamp, err := stampOf(rctx)
	if err != nil {
		if ctx.Err() == nil {
			r.setConnected(false, err)
		}
		return
	}
	was := r.setConnected(true, nil)
	r.notify(stamp, !was, onChange)
}

// notify calls onChange if stamp is not the one last told of, or if
// force.
func (r *remote) notify(stamp int64, force bool, onChange func()) {
	r.mu.Lock()
	changed := force || stamp != r.notified
	r.notified = stamp
	r.mu.Unlock()
	if changed {
		onChange()
	}
}

// sleep waits for d or until ctx is done, and reports whether ctx is
// still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
