package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

// Reloader reloads a handler's rules from their source and keeps the
// outcome of the last reload for /rules. It is safe for concurrent use.
type Reloader struct {
	handler  *proxy.Handler
	load     func() (*config.Rules, error)
	source   source.Source
	opts     ruleset.CompileOptions
	forget   func(keep func(key string) bool) int
	onReload func(ok bool, rs *ruleset.Set)
	onSame   func()
	now      func() time.Time
	log      *slog.Logger

	mu          sync.Mutex // serializes reloads and guards the fields below
	lastError   string
	lastErrorAt time.Time
	// retired are the counter keys of limits that reloads removed, with
	// when their counters may be forgotten (see Sweep).
	retired map[string]time.Time
}

// MaxRetiredGrace bounds how long the counters of a removed rule are kept:
// the longer of its unit and a minute, at most this.
const MaxRetiredGrace = time.Hour

// retiredGrace returns how long the counters of a removed limit with this
// window are kept, so that a rule removed and restored within it (an edit
// saved in two steps, a bad rollout rolled back) keeps its count.
func retiredGrace(window time.Duration) time.Duration {
	return min(max(window, time.Minute), MaxRetiredGrace)
}

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	// Handler is the handler whose rules are reloaded. Required.
	Handler *proxy.Handler
	// Load reads and validates the rules. Required for Reload unless
	// Source is set.
	Load func() (*config.Rules, error)
	// Source, if not nil and Load is nil, is where the rules are read
	// from; /rules shows its state and version.
	Source source.Source
	// Options compile every reloaded rule set; they should be those the
	// handler's rules were compiled with.
	Options ruleset.CompileOptions
	// Forget, if not nil, releases the store's counters for which keep
	// returns false (limit.Memory.Forget): a reload releases the state
	// of rules that are gone.
	Forget func(keep func(key string) bool) int
	// OnReload, if not nil, is called after every reload that changed
	// the rules or failed, with whether it succeeded and the rules then
	// in force; the metrics hang here.
	OnReload func(ok bool, rs *ruleset.Set)
	// OnUnchanged, if not nil, is called after every reload that read
	// the rules in force again (the same sha256).
	OnUnchanged func()
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the outcome of each reload. Default slog.Default().
	Logger *slog.Logger
}

// NewReloader returns the Reloader of cfg.
func NewReloader(cfg ReloaderConfig) *Reloader {
	r := &Reloader{
		handler: cfg.Handler, load: cfg.Load, source: cfg.Source, opts: cfg.Options, forget: cfg.Forget,
		onReload: cfg.OnReload, onSame: cfg.OnUnchanged, now: cfg.Now, log: cfg.Logger,
	}
	if r.load == nil && cfg.Source != nil {
		r.load = func() (*config.Rules, error) {
			rules, _, err := cfg.Source.Load(context.Background())
			return rules, err
		}
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Rules returns the rule set in force.
func (r *Reloader) Rules() *ruleset.Set { return r.handler.Rules() }

// Reload reads and compiles the rules and, if they are valid and differ
// from the rules in force, swaps them in. It reports whether it swapped.
// On error the rules in force stay, and the error is logged and kept for
// /rules until a later reload succeeds.
//
// Counters survive: a rule whose counter shape (app, api, method,
// algorithm, unit, precision) is unchanged keeps its key and so its state,
// and a changed limit applies at once to the counts already made. The
// state of rules that are gone is released once their grace period is
// over (see Sweep).
func (r *Reloader) Reload() (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed, err = r.reload()
	// The hooks (metrics) run before the log line, so that whoever reads
	// the log and then the metrics finds the reload counted.
	if err == nil && !changed && r.lastError == "" {
		// The same rules again: nothing changes, but whoever asked
		// (SIGHUP, POST /rules/reload, an edit) learns that it was read.
		if r.onSame != nil {
			r.onSame()
		}
		rs := r.handler.Rules()
		r.log.Info("rules unchanged", "path", rs.Source.Path, "sha256", rs.Source.SHA256)
		return false, nil
	}
	if r.onReload != nil {
		r.onReload(err == nil, r.handler.Rules())
	}
	if err != nil {
		r.lastError, r.lastErrorAt = err.Error(), r.now()
		r.log.Error("rule reload failed; keeping the rules in force", "err", err,
			"sha256", r.handler.Rules().Source.SHA256)
	} else {
		r.lastError, r.lastErrorAt = "", time.Time{}
		rs := r.handler.Rules()
		r.log.Info("rules reloaded", "path", rs.Source.Path, "sha256", rs.Source.SHA256, "apps", len(rs.Source.Apps))
	}
	return changed, err
}

func (r *Reloader) reload() (bool, error) {
	if r.load == nil {
		return false, errors.New("the rules have no source to reload from")
	}
	parsed, err := r.load()
	if err != nil {
		return false, err
	}
	if parsed.SHA256 == r.handler.Rules().Source.SHA256 {
		return false, nil
	}
	rs, err := ruleset.CompileWith(parsed, r.now(), r.opts)
	if err != nil {
		return false, err
	}
	old := r.handler.Rules()
	r.handler.SetRules(rs)
	r.retire(old, rs)
	r.sweep()
	return true, nil
}

// retire notes the limits of old that rs no longer has, and forgets the
// notes of those rs has again. r.mu is held.
func (r *Reloader) retire(old, rs *ruleset.Set) {
	now, keys := r.now(), rs.LimitKeys()
	for k, window := range old.LimitKeys() {
		if _, ok := keys[k]; !ok {
			if r.retired == nil {
				r.retired = map[string]time.Time{}
			}
			r.retired[k] = now.Add(retiredGrace(window))
		}
	}
	for k := range r.retired {
		if _, ok := keys[k]; ok {
			delete(r.retired, k)
		}
	}
}

// Sweep releases the counters of the limits that reloads removed and
// whose grace period (the longer of their unit and a minute, at most
// MaxRetiredGrace) is over; until then a restored rule finds its count.
// The server calls it every minute.
func (r *Reloader) Sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep()
}

func (r *Reloader) sweep() {
	if r.forget == nil {
		return
	}
	now := r.now()
	for k, until := range r.retired {
		if !now.Before(until) {
			delete(r.retired, k)
		}
	}
	rs := r.handler.Rules()
	r.forget(func(key string) bool {
		return rs.OwnsKey(key) || ruleset.KeyOf(key, func(k string) bool { _, ok := r.retired[k]; return ok })
	})
}

// lastErr returns the last reload error and when it happened, or "".
func (r *Reloader) lastErr() (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastError, r.lastErrorAt
}
