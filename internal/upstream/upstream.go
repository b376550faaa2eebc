// Package upstream sends admitted requests to pools of upstream targets:
// it balances them (least outstanding requests over two random choices,
// or round-robin, both weighted), takes failing targets out of the pool
// (passive outlier ejection and optional active health checks), retries a
// request on another target only when nothing of it reached the first,
// and speaks TLS (mTLS, SNI, HTTP/2) to targets, with the files read
// again when they change. See docs/routes.md.
//
// It knows nothing of limits, routes or the rule file's syntax: it is
// given config.Upstream values, and a Pool is an http.RoundTripper that
// the proxy's ReverseProxy uses. It never decides whether a request may
// go: that was decided, and counted, before.
package upstream

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// Defaults of Config.
const (
	DefaultFailures     = 5
	DefaultBaseEjection = 10 * time.Second
	DefaultMaxEjection  = 5 * time.Minute
)

// ErrNoHealthyTarget is wrapped by the error of a request to a pool whose
// targets are all out (ejected or failing their health checks).
var ErrNoHealthyTarget = errors.New("no healthy target")

// Events receives what a Registry's pools do, for the metrics. It must be
// safe for concurrent use.
type Events interface {
	// Ejected is called each time a target of upstream is taken out of
	// its pool.
	Ejected(upstream string)
}

// Config configures a Registry.
type Config struct {
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Failures is how many failed requests in a row (no connection, no
	// response headers in time, or a status of the upstream's outlier
	// statuses) eject a target. Default DefaultFailures.
	Failures int
	// BaseEjection is how long a first ejection lasts; each ejection
	// that follows another without a success in between lasts twice
	// as long, up to MaxEjection. Defaults DefaultBaseEjection and
	// DefaultMaxEjection.
	BaseEjection, MaxEjection time.Duration
	// MaxEjectionPercent bounds the targets of a pool that passive
	// ejection holds out at once, in percent of the pool, but lets it
	// hold out one target whatever the size of the pool (as Envoy's
	// max_ejection_percent). Whatever it says, the last target in a
	// pool is never ejected. Default config.DefaultMaxEjectionPercent.
	MaxEjectionPercent int
	// PanicThreshold is the percentage of a pool's targets below which
	// the pool, with fewer targets in it than that, sends requests to
	// its ejected targets as well (Envoy's healthy_panic_threshold).
	// Default config.DefaultPanicThreshold; negative turns it off.
	PanicThreshold int
	// ResponseHeaderTimeout bounds the wait for a target's response
	// headers (a route may set a shorter or longer one). Default 30s.
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerHost is the idle keep-alive pool of each target.
	// Default 256.
	MaxIdleConnsPerHost int
	// Events, if not nil, is told of ejections.
	Events Events
	// Logger receives changes of targets' states. Default slog.Default().
	Logger *slog.Logger
}

// Registry builds the pools of successive rule sets so that a pool that
// a reload changes keeps the connections and the health of the targets
// it still has. It is safe for concurrent use.
type Registry struct {
	cfg Config

	mu sync.Mutex
	// targets are those of the committed Set, by key; plain is the
	// transport of every plain http target, h2c that of every h2c one.
	targets    map[string]*Target
	plain, h2c *transport
	current    *Set
	wake       chan struct{}

	// ejectMu makes each passive ejection's look at the rest of its
	// pool and the ejection one step, so that two targets failing at
	// once cannot both pass the bounds. A target kept by a reload is in
	// the pools of both sets: one lock serves them all.
	ejectMu sync.Mutex
}

// New returns a Registry.
func New(cfg Config) (*Registry, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Failures = cmp.Or(cfg.Failures, DefaultFailures)
	cfg.BaseEjection = cmp.Or(cfg.BaseEjection, DefaultBaseEjection)
	cfg.MaxEjection = cmp.Or(cfg.MaxEjection, DefaultMaxEjection)
	cfg.MaxEjectionPercent = cmp.Or(cfg.MaxEjectionPercent, config.DefaultMaxEjectionPercent)
	cfg.PanicThreshold = cmp.Or(cfg.PanicThreshold, config.DefaultPanicThreshold)
	cfg.ResponseHeaderTimeout = cmp.Or(cfg.ResponseHeaderTimeout, 30*time.Second)
	cfg.MaxIdleConnsPerHost = cmp.Or(cfg.MaxIdleConnsPerHost, 256)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.Failures < 0:
		return nil, fmt.Errorf("upstream: failures %d is negative", cfg.Failures)
	case cfg.BaseEjection < 0 || cfg.MaxEjection < cfg.BaseEjection:
		return nil, fmt.Errorf("upstream: ejection times %s..%s are not in order", cfg.BaseEjection, cfg.MaxEjection)
	case cfg.MaxEjectionPercent < 0 || cfg.MaxEjectionPercent > 100:
		return nil, fmt.Errorf("upstream: max ejection percent %d is outside 0..100", cfg.MaxEjectionPercent)
	case cfg.PanicThreshold > 100:
		return nil, fmt.Errorf("upstream: panic threshold %d is above 100", cfg.PanicThreshold)
	}
	cfg.PanicThreshold = max(cfg.PanicThreshold, 0)
	return &Registry{cfg: cfg, targets: map[string]*Target{}, wake: make(chan struct{}, 1)}, nil
}

// Set is the pools of one rule set, by name. It is immutable; its
// targets' states change.
type Set struct {
	reg     *Registry
	pools   map[string]*Pool
	order   []*Pool
	targets map[string]*Target
}

// Build returns the pools of ups, reusing the targets (their connections
// and health) and the TLS transports of the committed Set where a pool,
// a target URL and the TLS settings are unchanged. It changes nothing in
// force until Commit.
func (r *Registry) Build(ups []config.Upstream) (*Set, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Set{reg: r, pools: map[string]*Pool{}, targets: map[string]*Target{}}
	for i := range ups {
		u := &ups[i]
		if _, dup := s.pools[u.Name]; dup {
			return nil, fmt.Errorf("upstream %q is defined twice", u.Name)
		}
		if len(u.Targets) == 0 {
			return nil, fmt.Errorf("upstream %q has no targets", u.Name)
		}
		tkey := tlsKey(u.TLS)
		p := &Pool{name: u.Name, reg: r, roundRobin: u.Balancing == config.BalanceRoundRobin,
			failures: r.cfg.Failures, ejection: r.cfg.BaseEjection, maxEjection: r.cfg.MaxEjection,
			maxEjectionPercent: r.cfg.MaxEjectionPercent, panicThreshold: r.cfg.PanicThreshold}
		if o := u.Outlier; o != nil {
			p.failures, p.ejection, p.maxEjection = o.Failures, o.Ejection, o.MaxEjection
			p.maxEjectionPercent = cmp.Or(o.MaxEjectionPercent, r.cfg.MaxEjectionPercent)
			p.panicThreshold, p.failStatus = o.PanicThreshold, slices.Clone(o.Statuses)
		}
		if hc := u.HealthCheck; hc != nil {
			c := *hc
			p.health = &c
		}
		for _, tc := range u.Targets {
			key := u.Name + "|" + tc.URL.String() + "|" + tkey + "|" + healthKey(u.HealthCheck)
			t := r.targets[key]
			if t == nil {
				t = s.targets[key] // an upstream defined twice is refused above
			}
			if t == nil {
				tr, err := r.transportFor(u.TLS, tc.URL)
				if err != nil {
					return nil, fmt.Errorf("upstream %q: %w", u.Name, err)
				}
				t = &Target{url: tc.URL, scheme: tc.URL.Scheme, pool: u.Name, tr: tr}
				if t.scheme == config.SchemeH2C {
					t.scheme = "http" // over tr, which speaks HTTP/2 only
				}
			}
			s.targets[key] = t
			p.targets = append(p.targets, t)
			p.weights = append(p.weights, int64(tc.Weight))
		}
		base := *u.Targets[0].URL
		p.base = &base
		p.current = make([]int64, len(p.targets))
		s.pools[u.Name] = p
		s.order = append(s.order, p)
	}
	return s, nil
}

// transportFor returns the transport of a new target at u with the tls
// section t: the shared plain or h2c one, or a new one. r.mu is held.
func (r *Registry) transportFor(t *config.UpstreamTLS, u *url.URL) (*transport, error) {
	if t != nil {
		return newTransport(t, u.Hostname(), r.cfg)
	}
	if u.Scheme == config.SchemeH2C {
		if r.h2c == nil {
			r.h2c, _ = newTransport(nil, "", r.cfg)
			r.h2c.Protocols = h2cOnly()
		}
		return r.h2c, nil
	}
	if r.plain == nil {
		r.plain, _ = newTransport(nil, "", r.cfg)
	}
	return r.plain, nil
}

// healthKey identifies health check settings: a target whose pool's
// check changes starts over.
func healthKey(h *config.HealthCheck) string {
	if h == nil {
		return ""
	}
	return fmt.Sprintf("%s %s %s %d %d", h.Path, h.Interval, h.Timeout, h.Healthy, h.Unhealthy)
}

// Commit puts s in force: the targets that s no longer has are dropped,
// the idle connections of their own (TLS) transports closed; the health
// checker (Run) probes s's targets from now on.
func (r *Registry) Commit(s *Set) {
	r.mu.Lock()
	old := r.targets
	r.targets, r.current = s.targets, s
	r.mu.Unlock()
	for k, t := range old {
		if s.targets[k] != t {
			if t.tr != r.plain && t.tr != r.h2c {
				t.closeIdle()
			} else {
				t.byTimeout.Range(func(_, v any) bool {
					v.(*transport).CloseIdleConnections()
					return true
				})
			}
		}
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Current returns the committed Set, nil before the first Commit.
func (r *Registry) Current() *Set {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// Pool returns the pool named name, nil if s has none.
func (s *Set) Pool(name string) *Pool {
	if s == nil {
		return nil
	}
	return s.pools[name]
}

// Pools returns s's pools in file order.
func (s *Set) Pools() []*Pool {
	if s == nil {
		return nil
	}
	return slices.Clone(s.order)
}

// Pool is one upstream's targets and how a request chooses among them. It
// is an http.RoundTripper, safe for concurrent use.
type Pool struct {
	name       string
	reg        *Registry
	targets    []*Target
	weights    []int64 // of targets
	base       *url.URL
	roundRobin bool
	health     *config.HealthCheck
	// failures, ejection, maxEjection, maxEjectionPercent,
	// panicThreshold and failStatus are the pool's outlier settings
	// (Config's, or the upstream's outlier section).
	failures                           int
	ejection, maxEjection              time.Duration
	maxEjectionPercent, panicThreshold int
	failStatus                         []config.StatusRange

	// mu guards current, the smooth weighted round-robin state (as
	// nginx's upstream module does it).
	mu      sync.Mutex
	current []int64
}

// Name returns the pool's upstream name.
func (p *Pool) Name() string { return p.name }

// Base returns the URL of the pool's first target: the scheme and path
// every target shares. A request sent through the pool may carry it; the
// pool sets the host of the target it chooses.
func (p *Pool) Base() *url.URL { return p.base }

// Targets returns the pool's targets.
func (p *Pool) Targets() []*Target { return slices.Clone(p.targets) }

// States returns the states of the pool's targets at now, with their
// weights.
func (p *Pool) States(now time.Time) []TargetState {
	out := make([]TargetState, len(p.targets))
	for i, t := range p.targets {
		out[i] = t.State(now)
		out[i].Weight = p.weights[i]
	}
	return out
}

// Ready reports whether the pool has a target that takes requests at
// now: one in the pool (not ejected, not failing its health checks), or,
// when the pool panics, one not failing its health checks.
func (p *Pool) Ready(now time.Time) bool {
	n := now.UnixNano()
	panicking := p.panicking(n)
	for _, t := range p.targets {
		if t.usable(n, panicking) {
			return true
		}
	}
	return false
}

// Panicking reports whether the pool has so few targets in it at now
// that it sends requests to its ejected targets too.
func (p *Pool) Panicking(now time.Time) bool { return p.panicking(now.UnixNano()) }

// panicking reports whether fewer than panicThreshold percent of the
// pool's targets are in it at now (Unix ns).
func (p *Pool) panicking(now int64) bool {
	if p.panicThreshold == 0 {
		return false
	}
	in := 0
	for _, t := range p.targets {
		if t.available(now) {
			in++
		}
	}
	return in*100 < p.panicThreshold*len(p.targets)
}

// NoHealthyTargetError is the error of a request to a pool with no target
// in it.
type NoHealthyTargetError struct{ Upstream string }

func (e *NoHealthyTargetError) Error() string {
	return fmt.Sprintf("upstream %s: %v: every target is ejected or failing its health check", e.Upstream, ErrNoHealthyTarget)
}

// Unwrap returns ErrNoHealthyTarget.
func (e *NoHealthyTargetError) Unwrap() error { return ErrNoHealthyTarget }

// WithTimeout returns p with a response header timeout of d instead of
// the Registry's, for a route that sets its own; p itself when d is 0.
func WithTimeout(p *Pool, d time.Duration) http.RoundTripper {
	if d <= 0 {
		return p
	}
	return &timeoutRT{p: p, d: d}
}

type timeoutRT struct {
	p *Pool
	d time.Duration
}

func (t *timeoutRT) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.p.roundTrip(req, t.d)
}
