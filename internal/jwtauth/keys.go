package jwtauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/safefile"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// Defaults of KeysConfig.
const (
	DefaultRefresh      = 5 * time.Minute
	DefaultRefetch      = time.Minute
	DefaultFetchTimeout = 10 * time.Second
	// MaxJWKSBytes is the largest JWKS read: real ones are a few KiB.
	MaxJWKSBytes = 1 << 20
)

// KeysConfig configures Keys.
type KeysConfig struct {
	// Source is a JWKS file, or an http:// or https:// URL serving one.
	// Required.
	Source string
	// Refresh is how often a URL is fetched again. Default
	// DefaultRefresh. A file is read again when it changes.
	Refresh time.Duration
	// Refetch is the least time between two fetches of a URL made
	// because a token named a kid the set in force lacks (Refetch);
	// tokens with unknown kids in between are refused without a fetch,
	// so that callers sending made-up kids cannot make the gateway
	// hammer the JWKS endpoint. Default DefaultRefetch.
	Refetch time.Duration
	// Now is the clock of Refetch. Default time.Now.
	Now func() time.Time
	// Client fetches a URL. Default: an http.Client with a
	// DefaultFetchTimeout timeout.
	Client *http.Client
	// Logger receives the outcome of each reload. Default
	// slog.Default().
	Logger *slog.Logger
}

// Keys is the JWKS in force, read from a file or a URL and kept fresh by
// Run: a set that fails to load or parse never replaces the last good
// one. It is safe for concurrent use.
type Keys struct {
	cfg KeysConfig
	url bool
	log *slog.Logger
	cur atomic.Pointer[KeySet]

	mu          sync.Mutex
	skipped     []string      // the Skipped of the last set logged
	lastRefetch time.Time     // when Refetch last fetched
	flight      chan struct{} // closed when the Refetch in flight ends; nil if none
}

// NewKeys reads the JWKS of cfg.Source, failing if it cannot.
func NewKeys(ctx context.Context, cfg KeysConfig) (*Keys, error) {
	if cfg.Source == "" {
		return nil, errors.New("jwtauth: no JWKS source")
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Refresh < 0 {
		return nil, fmt.Errorf("jwtauth: JWKS refresh %s is negative", cfg.Refresh)
	}
	if cfg.Refetch == 0 {
		cfg.Refetch = DefaultRefetch
	}
	if cfg.Refetch < 0 {
		return nil, fmt.Errorf("jwtauth: JWKS refetch interval %s is negative", cfg.Refetch)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: DefaultFetchTimeout}
	}
	k := &Keys{cfg: cfg, log: cfg.Logger, url: IsURL(cfg.Source)}
	if k.log == nil {
		k.log = slog.Default()
	}
	if err := k.Reload(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// IsURL reports whether a JWKS source is a URL rather than a file.
func IsURL(source string) bool {
	return strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://")
}

// Current returns the key set in force.
func (k *Keys) Current() *KeySet { return k.cur.Load() }

// Reload reads the JWKS again and swaps it in; on failure the set in
// force stays, and the error says why. The keys the set holds that the
// gateway does not verify with (KeySet.Skipped) are logged when they
// differ from those of the last set loaded, not at every reload.
func (k *Keys) Reload(ctx context.Context) error {
	data, err := k.read(ctx)
	if err == nil {
		var set *KeySet
		if set, err = ParseJWKS(data); err == nil {
			k.cur.Store(set)
			k.logSkipped(set.Skipped())
			return nil
		}
	}
	return fmt.Errorf("loading the JWKS %s: %w", k.cfg.Source, err)
}

func (k *Keys) logSkipped(skipped []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if slices.Equal(skipped, k.skipped) {
		return
	}
	k.skipped = skipped
	if len(skipped) > 0 {
		k.log.Warn("JWKS keys skipped: the gateway verifies only RS256 (of 2048 bits or more), ES256 and EdDSA; tokens signed with them are refused",
			"source", k.cfg.Source, "skipped", JoinSkipped(skipped))
	}
}

// Refetch fetches a URL's JWKS again because a token named kid, which the
// set in force lacks (a key rotated in since the last refresh), and
// returns the set then in force; or returns nil without fetching when the
// source is a file (its changes are watched), or when the last such fetch
// was less than KeysConfig.Refetch ago. A call while one fetches waits for
// that fetch and returns its outcome. Safe for concurrent use.
func (k *Keys) Refetch(kid string) *KeySet {
	if !k.url {
		return nil
	}
	k.mu.Lock()
	if f := k.flight; f != nil {
		k.mu.Unlock()
		<-f
		return k.Current()
	}
	now := k.cfg.Now()
	if !k.lastRefetch.IsZero() && now.Sub(k.lastRefetch) < k.cfg.Refetch {
		k.mu.Unlock()
		return nil
	}
	k.lastRefetch = now
	f := make(chan struct{})
	k.flight = f
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.flight = nil
		k.mu.Unlock()
		close(f)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFetchTimeout)
	defer cancel()
	if err := k.Reload(ctx); err != nil {
		k.log.Error("JWKS fetch for an unknown kid failed; the keys in force stay", "kid", kid[:min(len(kid), 64)], "err", err)
		return nil
	}
	k.log.Info("JWKS fetched again: a token named a kid it lacked", "source", k.cfg.Source, "kid", kid[:min(len(kid), 64)], "keys", k.Current().Len())
	return k.Current()
}

func (k *Keys) read(ctx context.Context) ([]byte, error) {
	var body io.ReadCloser
	if k.url {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.cfg.Source, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/jwk-set+json, application/json")
		resp, err := k.cfg.Client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("status %s", resp.Status)
		}
		body = resp.Body
	} else {
		// A regular file only, read within a timeout: a FIFO or a
		// device named by mistake must not hang the start or a reload.
		return safefile.Read(k.cfg.Source, MaxJWKSBytes)
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, MaxJWKSBytes+1))
	if err == nil && len(data) > MaxJWKSBytes {
		err = fmt.Errorf("larger than %d bytes", MaxJWKSBytes)
	}
	return data, err
}

// Watch keeps the key set fresh until ctx is done or stop is called: a
// file is read again when it changes (see package watch), a URL every
// Refresh. Failures are logged, and the last good set stays in force.
// The file's watch is in place when Watch returns.
func (k *Keys) Watch(ctx context.Context) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	reload := func() {
		if err := k.Reload(ctx); err != nil {
			if ctx.Err() == nil {
				k.log.Error("JWKS reload failed; the keys in force stay", "err", err)
			}
			return
		}
		k.log.Info("JWKS reloaded", "source", k.cfg.Source, "keys", k.Current().Len())
	}
	done := make(chan struct{})
	stop = func() {
		cancel()
		<-done
	}
	if !k.url {
		w, err := watch.New(watch.Config{Path: k.cfg.Source, OnChange: reload, Logger: k.log})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watching the JWKS %s: %w", k.cfg.Source, err)
		}
		go func() {
			defer close(done)
			w.Run(ctx)
			w.Close()
		}()
		return stop, nil
	}
	go func() {
		defer close(done)
		t := time.NewTicker(k.cfg.Refresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				reload()
			}
		}
	}()
	return stop, nil
}
