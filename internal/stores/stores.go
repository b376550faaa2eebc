// Package stores builds the counter stores that decide limits from the
// store settings both `gateway serve` and `gateway rls` take (--store,
// --max-keys, --redis-*, --fail-mode, --local-share): the memory store,
// the Redis store with its slots, its fleet membership and its metrics,
// and under --fail-mode local the memory store that decides on this
// gateway's share of the fleet (docs/fleet.md, "When Redis fails").
//
// It builds and runs stores; it must not decide requests (package limit
// and its stores do), apply the fail mode (package failmode does), or
// know either command's requests.
package stores

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Stores are the counter stores of a Config's settings. Built once by
// New, they are safe for concurrent use.
type Stores struct{ st *stores }

// New builds the stores of cfg, validating it. onCircuit, if not nil, is
// called when the Redis store's circuit breaker opens or closes.
func New(cfg Config, onCircuit func(open bool)) (*Stores, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if onCircuit == nil {
		onCircuit = func(bool) {}
	}
	st, err := newStore(cfg, onCircuit)
	if err != nil {
		return nil, err
	}
	return &Stores{st: st}, nil
}

// Store returns the store that decides.
func (s *Stores) Store() limit.Store { return s.st.store }

// FailMode returns what a failure of Store does (--fail-mode); only the
// Redis store fails.
func (s *Stores) FailMode() failmode.Mode { return s.st.failMode }

// Local returns the store that decides under failmode.Local while Store
// fails, nil otherwise. With --local-share auto it scales each limit by
// itself; otherwise scale the limits by LocalScale.
func (s *Stores) Local() limit.Store { return s.st.local }

// Slots and LocalSlots are the slots of requests in flight of the Redis
// store and of its local fallback; nil for the defaults (memory).
func (s *Stores) Slots() limit.Slots      { return s.st.slots }
func (s *Stores) LocalSlots() limit.Slots { return s.st.localSlots }

// Resetter returns what clears a counter of Store: the Redis store in
// Redis, for the fleet, or the memory store; nil if neither.
func (s *Stores) Resetter() limit.Resetter {
	switch {
	case s.st.redis != nil:
		return s.st.redis
	case s.st.mem != nil:
		return s.st.mem
	}
	return nil
}

// Forget returns the memory store's Forget, to release the counters of
// removed rules; nil for Redis, whose keys expire.
func (s *Stores) Forget() func(keep func(key string) bool) int { return s.st.forget() }

// LocalScale returns the share of cfg to scale limits by before asking
// Local: --local-share, or 1 when it is auto (Local scales them then).
func LocalScale(cfg Config) float64 { return compileShare(cfg) }

// Start makes the Redis store ready (in the background if Redis does not
// answer) and keeps this process a member of the Redis fleet until ctx
// is done.
func (s *Stores) Start(ctx context.Context, log *slog.Logger) {
	s.st.start(ctx, log)
	s.st.runFleet(ctx, log)
}

// Register registers the Redis store's metrics with reg.
func (s *Stores) Register(reg prometheus.Registerer) { s.st.register(reg) }

// Keys returns the number of counters kept in this process.
func (s *Stores) Keys() int { return s.st.keys() }

// Health reports on the store for /readyz.
func (s *Stores) Health(ctx context.Context) Health { return s.st.health(ctx) }

// Sweep evicts the memory store's idle counters at now; call it every
// minute or so.
func (s *Stores) Sweep(now time.Time) {
	if s.st.mem != nil {
		s.st.mem.Sweep(now)
	}
}

// Close releases the stores.
func (s *Stores) Close() error { return s.st.close() }
