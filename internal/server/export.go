package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Stores are the counter stores that `gateway serve` builds from a
// Config's store settings (Store, MaxKeys, Redis*, FailMode, LocalShare),
// for other commands that decide with the same engine (`gateway rls`):
// built once, they are safe for concurrent use.
type Stores struct{ st *stores }

// NewStores builds the stores of cfg's store settings; the other fields
// of cfg are not read. onCircuit, if not nil, is called when the Redis
// store's circuit breaker opens or closes.
func NewStores(cfg Config, onCircuit func(open bool)) (*Stores, error) {
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

// Local returns the store that decides under FailLocal while Store
// fails, nil otherwise. With --local-share auto it scales each limit by
// itself; otherwise scale the limits by LocalShare.
func (s *Stores) Local() limit.Store { return s.st.local }

// LocalScale returns the share of cfg to scale limits by before asking
// Local: --local-share, or 1 when it is auto (Local scales them then).
func LocalScale(cfg Config) float64 { return compileShare(cfg) }

// Start makes the Redis store ready (in the background if Redis does not
// answer) and keeps this process a member of the Redis fleet until ctx
// is done, as `serve` does.
func (s *Stores) Start(ctx context.Context, log *slog.Logger) {
	s.st.start(ctx, log)
	s.st.runFleet(ctx, log)
}

// Register registers the Redis store's metrics with reg.
func (s *Stores) Register(reg prometheus.Registerer) { s.st.register(reg) }

// Keys returns the number of counters kept in this process.
func (s *Stores) Keys() int { return s.st.keys() }

// Health reports on the store for /readyz.
func (s *Stores) Health(ctx context.Context) StoreHealth { return s.st.health(ctx) }

// Close releases the stores.
func (s *Stores) Close() error { return s.st.close() }

// CertReloader serves a TLS certificate pair that it reloads when either
// file changes (Watch) or on Reload, as the proxy port of `serve` does.
type CertReloader struct{ c *certReloader }

// NewCertReloader loads the pair, failing if it does not load.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	c, err := newCertReloader(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	return &CertReloader{c: c}, nil
}

// Reload loads the pair again; on failure the pair in use stays.
func (r *CertReloader) Reload() error { return r.c.Reload() }

// Watch reloads the pair when either file changes until stop is called
// or ctx is done.
func (r *CertReloader) Watch(ctx context.Context) (stop func(), err error) { return r.c.Watch(ctx) }

// TLSConfig returns a server TLS configuration serving the pair, TLS 1.2
// at least, offering protos by ALPN.
func (r *CertReloader) TLSConfig(protos ...string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos, GetCertificate: r.c.GetCertificate}
}

// Sweep evicts the memory store's idle counters at now; `serve` does it
// every minute.
func (s *Stores) Sweep(now time.Time) {
	if s.st.mem != nil {
		s.st.mem.Sweep(now)
	}
}
