package upstream

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Target is one server of a pool, with its load and health. Its state
// survives reloads that keep it (see Registry.Build). It is safe for
// concurrent use.
type Target struct {
	url *url.URL
	// scheme is the one requests to t are sent with: url's, or http for
	// an h2c target, whose transport speaks HTTP/2 to it.
	scheme string
	pool   string
	tr     *transport
	// byTimeout are copies of tr with another response header timeout,
	// for the routes that set their own, by timeout.
	byTimeout   sync.Map
	outstanding atomic.Int64
	// ejectedUntil is when the passive ejection ends (Unix ns); down is
	// set while the active health check finds the target failing.
	ejectedUntil atomic.Int64
	down         atomic.Bool
	ejections    atomic.Int64 // in all

	mu sync.Mutex
	// failures are the failed requests in a row; strikes the ejections
	// in a row, without a success between them. kept is set when the
	// bounds of passive ejection kept t in its pool in this run of
	// failures (and that was logged).
	failures, strikes int
	kept              bool
	// probeOK and probeFail are the health checks in a row that passed
	// and failed; nextProbe when the next is due.
	probeOK, probeFail int
	nextProbe          time.Time
}

// transport returns t's transport for a response header timeout of d,
// def being that of t.tr.
func (t *Target) transport(d, def time.Duration) *transport {
	if d == def || d <= 0 {
		return t.tr
	}
	if tr, ok := t.byTimeout.Load(d); ok {
		return tr.(*transport)
	}
	c := &transport{Transport: t.tr.Clone(), files: t.tr.files, dial: t.tr.dial}
	c.ResponseHeaderTimeout = d
	c.DialContext = WriteBounded(c.dial, d)
	tr, _ := t.byTimeout.LoadOrStore(d, c)
	return tr.(*transport)
}

// closeIdle closes the idle connections of t's transports.
func (t *Target) closeIdle() {
	t.tr.CloseIdleConnections()
	t.byTimeout.Range(func(_, v any) bool {
		v.(*transport).CloseIdleConnections()
		return true
	})
}

// URL returns the target's URL.
func (t *Target) URL() *url.URL { return t.url }

// available reports whether t is in its pool at now (Unix ns): neither
// ejected nor failing its health check.
func (t *Target) available(now int64) bool {
	return !t.down.Load() && now >= t.ejectedUntil.Load()
}

// usable reports whether t takes requests at now (Unix ns): when it is in
// its pool, or, in a panicking pool, when it is only ejected. A target
// failing its active health check stays out: that is the target's own
// answer, not what its callers' requests made of it.
func (t *Target) usable(now int64, panicking bool) bool {
	return !t.down.Load() && (panicking || now >= t.ejectedUntil.Load())
}

// TargetState is a target's state, for /upstreams.
type TargetState struct {
	URL    string `json:"url"`
	Weight int64  `json:"weight"`
	// State is "healthy", "ejected" (by failed requests) or "unhealthy"
	// (by failed health checks).
	State        string     `json:"state"`
	EjectedUntil *time.Time `json:"ejectedUntil,omitempty"`
	Outstanding  int64      `json:"outstanding"`
	// Failures are the failed requests in a row; Ejections the times the
	// target was ejected since it joined the pool.
	Failures  int   `json:"failures"`
	Ejections int64 `json:"ejections"`
}

// State returns t's state at now, without its weight, which is its
// pool's (Pool.States).
func (t *Target) State(now time.Time) TargetState {
	t.mu.Lock()
	failures := t.failures
	t.mu.Unlock()
	s := TargetState{URL: t.url.String(), State: "healthy",
		Outstanding: t.outstanding.Load(), Failures: failures, Ejections: t.ejections.Load()}
	if until := t.ejectedUntil.Load(); now.UnixNano() < until {
		u := time.Unix(0, until).UTC()
		s.State, s.EjectedUntil = "ejected", &u
	}
	if t.down.Load() {
		s.State = "unhealthy"
	}
	return s
}

// observe counts the outcome of a request to t: failed is a connection
// failure, a timeout or a status of the pool's outlier statuses. Failures
// in a row eject t, within the bounds of eject.
func (p *Pool) observe(t *Target, failed bool) {
	t.mu.Lock()
	if !failed {
		t.failures, t.strikes, t.kept = 0, 0, false
		t.mu.Unlock()
		return
	}
	t.failures++
	due := p.failures != 0 && t.failures >= p.failures
	t.mu.Unlock()
	if due {
		p.eject(t)
	}
}

// eject takes t out of its pool after failures in a row, unless that
// would leave the pool without a target in it, or hold out more of its
// targets than maxEjectionPercent allows (at least one). Passive ejection
// counts what callers' requests did to a target, and one caller can make
// every request it sends fail (a slow or failing path, a request the
// upstream refuses): without the bounds, it could empty a pool for every
// caller. Envoy bounds outlier ejection the same way
// (max_ejection_percent).
func (p *Pool) eject(t *Target) {
	cfg := &p.reg.cfg
	p.reg.ejectMu.Lock()
	defer p.reg.ejectMu.Unlock()
	now := cfg.Now()
	n := now.UnixNano()
	t.mu.Lock()
	if t.failures < p.failures || n < t.ejectedUntil.Load() {
		// A success came in between, or t is already out: requests
		// that were in flight.
		t.mu.Unlock()
		return
	}
	out, others := 0, 0
	for _, o := range p.targets {
		switch {
		case o == t:
		case n < o.ejectedUntil.Load():
			out++
		case !o.down.Load():
			others++
		}
	}
	if others == 0 || out >= max(1, len(p.targets)*p.maxEjectionPercent/100) {
		logged := t.kept
		t.kept = true
		t.mu.Unlock()
		if !logged {
			cfg.Logger.Warn("upstream target fails requests in a row but stays in its pool: ejecting it would leave too few targets",
				"upstream", p.name, "target", t.url.String(), "ejected", out, "inPool", others+1, "targets", len(p.targets))
		}
		return
	}
	d := p.ejection << min(t.strikes, 20)
	if d > p.maxEjection || d <= 0 {
		d = p.maxEjection
	}
	t.failures, t.kept = 0, false
	t.strikes++
	t.ejectedUntil.Store(now.Add(d).UnixNano())
	t.mu.Unlock()
	t.ejections.Add(1)
	if cfg.Events != nil {
		cfg.Events.Ejected(p.name)
	}
	cfg.Logger.Warn("upstream target ejected after failing requests in a row", "upstream", p.name, "target", t.url.String(), "for", d.String())
}

// Check probes, at now, the targets of s whose health check is due, and
// waits for the probes; it returns when the next one is due (the zero
// time when no pool checks its targets). Run calls it.
func (s *Set) Check(ctx context.Context, now time.Time) time.Time {
	var wg sync.WaitGroup
	var next time.Time
	for _, p := range s.order {
		hc := p.health
		if hc == nil {
			continue
		}
		for _, t := range p.targets {
			t.mu.Lock()
			due := t.nextProbe
			if !now.Before(due) {
				t.nextProbe = now.Add(hc.Interval)
				due = t.nextProbe
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.probe(ctx, t)
				}()
			}
			t.mu.Unlock()
			if next.IsZero() || due.Before(next) {
				next = due
			}
		}
	}
	wg.Wait()
	return next
}

// probe asks t for the health check path once and counts the outcome: a
// 2xx or 3xx response within the timeout passes.
func (p *Pool) probe(parent context.Context, t *Target) {
	hc := p.health
	ctx, cancel := context.WithTimeout(parent, hc.Timeout)
	defer cancel()
	u := *t.url
	u.Scheme = t.scheme
	u.Path, u.RawQuery = t.url.Path+hc.Path, ""
	if i := indexByte(hc.Path, '?'); i >= 0 {
		u.Path, u.RawQuery = t.url.Path+hc.Path[:i], hc.Path[i+1:]
	}
	ok := false
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err == nil {
		req.Header.Set("User-Agent", "gateway-health-check")
		if resp, err := t.tr.RoundTrip(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			ok = resp.StatusCode >= 200 && resp.StatusCode < 400
		}
	}
	if parent.Err() != nil {
		return // the checker is stopping: no verdict
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	log := p.reg.cfg.Logger
	if ok {
		t.probeOK, t.probeFail = t.probeOK+1, 0
		if t.down.Load() && t.probeOK >= hc.Healthy {
			t.down.Store(false)
			log.Info("upstream target passes its health check again", "upstream", p.name, "target", t.url.String())
		}
		return
	}
	t.probeOK, t.probeFail = 0, t.probeFail+1
	if !t.down.Load() && t.probeFail >= hc.Unhealthy {
		t.down.Store(true)
		log.Warn("upstream target fails its health check; out of the pool", "upstream", p.name, "target", t.url.String())
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Run runs the active health checks of the committed Set until ctx is
// done.
func (r *Registry) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var next time.Time
		if s := r.Current(); s != nil {
			next = s.Check(ctx, r.cfg.Now())
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(r.cfg.Now()), 10*time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}
