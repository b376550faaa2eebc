// Package rls serves Envoy's rate-limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with this
// gateway's limiter: the descriptors of a request are looked up in an
// envoyproxy/ratelimit configuration (internal/rlsconfig) and decided
// together, all or nothing, by a limit.Store, under the same fail modes
// as `gateway serve` (docs/rls.md).
//
// It knows the protocol and the fail modes; it does not parse
// configuration, keep counters or talk to Redis.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// Bounds on a request, so that no caller makes the service build
// unbounded keys or loop long: far above what Envoy's rate-limit actions
// produce (a few descriptors of a few entries).
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 64
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 32
	// MaxKeyBytes is the longest a descriptor's keys and values may be
	// together.
	MaxKeyBytes = 4096
)

// Config configures a Service.
type Config struct {
	// Store decides. Required.
	Store limit.Store
	// FailMode is what a failure of Store does to a request: open admits
	// it, closed denies it (OVER_LIMIT), local decides it with Local.
	FailMode failmode.Mode
	// Local decides under FailLocal, with each limit scaled by
	// LocalShare. Required for FailLocal.
	Local limit.Store
	// LocalShare scales the limits Local decides, in (0, 1]; 0 means 1
	// (Local scales them itself, as with --local-share auto).
	LocalShare float64
	// Headers selects the response headers the service asks Envoy to add:
	// legacy X-RateLimit-Limit/Remaining/Reset, the IETF draft's
	// RateLimit-Policy and RateLimit, both, or none. The zero value is
	// both.
	Headers ratelimitheader.Mode
	// ShadowMode makes every limit a shadow limit, as envoyproxy/ratelimit's
	// SHADOW_MODE does: limits are decided, counted when they admit and
	// reported (a status says OVER_LIMIT where the limit would deny), but
	// the overall code is always OK. For trying the service on live
	// traffic before it enforces anything.
	ShadowMode bool
	// Metrics, if not nil, counts decisions.
	Metrics *observe.RLSMetrics
	// Logger receives store errors (at most one a second). Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Observers see every call once it is answered (Top, AccessLog).
	Observers []Observer
	// KeyPrefix starts the key of every counter, so that services
	// sharing one Redis keep apart (envoyproxy/ratelimit's
	// CACHE_KEY_PREFIX). Default none.
	KeyPrefix string
	// QuotaMode makes every limit a quota, as envoyproxy/ratelimit's
	// QUOTA_MODE does: see rlsconfig.Descriptor.QuotaMode.
	QuotaMode bool
	// DynamicMetadata returns, in every response's dynamic metadata, the
	// request's domain and descriptors and the quota limits it went over,
	// as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does
	// (docs/rls.md, "Protocol"). Default off.
	DynamicMetadata bool
	// ReferenceCounting counts as envoyproxy/ratelimit does (docs/rls.md,
	// "Counting as envoyproxy/ratelimit"): every limit a fixed window
	// aligned to the Unix epoch, each descriptor decided and counted on
	// its own rather than all or nothing, and the hits of a request over
	// a limit counted too. Default off: this gateway's algorithms, all or
	// nothing.
	ReferenceCounting bool
	// StopOverLimitCount, with ReferenceCounting, leaves a request over a
	// limit uncounted, against that limit and the others
	// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	StopOverLimitCount bool
	// ReferenceHeaders, if not nil, adds envoyproxy/ratelimit's three
	// response headers (LIMIT_RESPONSE_HEADERS_ENABLED) of the limit
	// closest to denying, under these names. Default nil: none.
	ReferenceHeaders *HeaderNames
}

// HeaderNames are the names of envoyproxy/ratelimit's response headers.
type HeaderNames struct {
	// Limit carries the limit's requests per unit; Remaining what is
	// left of it; Reset the seconds until its window ends.
	Limit, Remaining, Reset string
}

// DefaultHeaderNames are envoyproxy/ratelimit's default names
// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
var DefaultHeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Service implements RateLimitService. It is safe for concurrent use; its
// configuration is swapped whole by SetConfig.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg   Config
	log   *slog.Logger
	rules atomic.Pointer[rlsconfig.Config]
	// failover decides on Store, and applies FailMode when it fails.
	failover *failmode.Failover
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service with no configuration: until SetConfig, every
// domain is unknown and every request is OK.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("rls: New needs a Store")
	case cfg.FailMode == failmode.Local && cfg.Local == nil:
		return nil, errors.New("rls: New needs a Local store for fail mode local")
	case cfg.LocalShare < 0 || cfg.LocalShare > 1:
		return nil, fmt.Errorf("rls: local share %v is outside (0, 1]", cfg.LocalShare)
	}
	if cfg.LocalShare == 0 {
		cfg.LocalShare = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	fo, err := failmode.New(failmode.Config{Mode: cfg.FailMode, Store: cfg.Store, Local: cfg.Local, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, failover: fo}
	s.rules.Store(&rlsconfig.Config{})
	return s, nil
}

// SetConfig puts c in force for the requests that start after it.
func (s *Service) SetConfig(c *rlsconfig.Config) { s.rules.Store(c) }

// Config returns the configuration in force.
func (s *Service) Config() *rlsconfig.Config { return s.rules.Load() }

// decision is what ShouldRateLimit works out for one descriptor.
type decision struct {
	lim   *rlsconfig.Limit
	desc  *rlsconfig.Descriptor // nil for an override from the request
	match rlsconfig.Match
	label string // the descriptor label of the metrics
	hits  int64
	req   int // index in reqs, -1 when the store is not asked
	skip  outcome
	// shared is the configured descriptor whose counter a limit override
	// shares (the one its entries match, of the same unit), as
	// envoyproxy/ratelimit's keys make it.
	shared *rlsconfig.Match
	// shadow and quota report whether the limit never denies: a shadow
	// limit (shadow_mode or ShadowMode) or a quota (quota_mode or
	// QuotaMode).
	shadow, quota bool
}

// ShouldRateLimit decides the request's descriptors together: the
// request is admitted (overall OK) only if every limit that applies
// admits it, and only then is it counted, against each of them, for its
// hits. A descriptor that matches no limit, or whose domain is unknown,
// is OK, as envoyproxy/ratelimit has it.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := s.cfg.Now()
	resp, ds, err := s.shouldRateLimit(ctx, req, now)
	if len(s.cfg.Observers) > 0 {
		c := &Call{Start: now, Duration: s.cfg.Now().Sub(now), Request: req, Response: resp, Err: err, ds: ds}
		if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
			c.Span = sp
		}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			c.Peer = p.Addr.String()
		}
		for _, o := range s.cfg.Observers {
			o.ObserveCall(c)
		}
	}
	return resp, err
}

// shouldRateLimit decides req at now; ds are its descriptors' decisions,
// nil when req is refused.
func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, now time.Time) (*rlsv3.RateLimitResponse, []decision, error) {
	if req.GetDomain() == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	switch {
	case len(descs) == 0:
		return nil, nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(descs) > MaxDescriptors:
		return nil, nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d", len(descs), MaxDescriptors)
	}
	rules := s.rules.Load()
	dom := rules.Domains[req.Domain]
	domLabel := req.Domain
	if dom == nil {
		domLabel = unknownDomain
	}
	ds := make([]decision, len(descs))
	var entries [8]rlsconfig.Entry
	replaced := map[string]bool(nil)
	nreq := 0
	for i, d := range descs {
		ds[i].req = -1
		if len(d.GetEntries()) > MaxEntries {
			return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: at most %d", i, len(d.GetEntries()), MaxEntries)
		}
		size := 0
		es := entries[:0]
		for _, e := range d.GetEntries() {
			size += len(e.GetKey()) + len(e.GetValue())
			es = append(es, rlsconfig.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if size > MaxKeyBytes {
			return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d's keys and values are %d bytes: at most %d", i, size, MaxKeyBytes)
		}
		ds[i].hits = hitsOf(req, d)
		if dom == nil {
			// An unknown domain is OK for every descriptor, limit
			// override or not, as in envoyproxy/ratelimit.
			continue
		}
		if o := d.GetLimit(); o != nil {
			lim, err := overrideLimit(o)
			if err != nil {
				return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			if m, ok := dom.Find(es); ok && len(es) > 0 && !m.Descriptor.Limit.Unlimited && m.Descriptor.Limit.Params.Window == lim.Params.Window && ownValues(&m, es) {
				// The configured counter of the same entries and unit:
				// its algorithm, the override's number.
				p := m.Descriptor.Limit.Params
				p.Limit, p.Burst, p.Lock = lim.Params.Limit, 0, 0
				lim.Params = p
				ds[i].shared = &m
			}
			ds[i].lim, ds[i].label = lim, overrideLabel
			continue
		}
		if len(es) == 0 {
			continue
		}
		m, ok := dom.Find(es)
		if !ok {
			continue
		}
		ds[i].lim, ds[i].desc, ds[i].match = m.Descriptor.Limit, m.Descriptor, m
		ds[i].label = metricLabel(m.Descriptor, es)
		for _, r := range m.Descriptor.Limit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
	}
	reqs := make([]limit.Request, 0, len(descs))
	var params []limit.Params // ReferenceCounting's
	if s.cfg.ReferenceCounting {
		params = make([]limit.Params, len(descs))
	}
	for i := range ds {
		d := &ds[i]
		switch {
		case d.lim == nil:
			continue
		case d.lim.Name != "" && replaced[d.lim.Name]:
			d.skip = outReplaced
			continue
		case d.lim.Unlimited:
			d.skip = outUnlimited
			continue
		}
		d.req = nreq
		nreq++
		r := limit.Request{
			Key: s.cfg.KeyPrefix + counterKey(req.Domain, descs[i].GetEntries(), d), Tag: tagPrefix + req.Domain,
			Params: &d.lim.Params, Cost: max(d.hits, 1),
		}
		if d.hits == 0 {
			r.Act = limit.Defer
		}
		d.shadow, d.quota = s.cfg.ShadowMode, s.cfg.QuotaMode
		if d.desc != nil {
			d.shadow = d.shadow || d.desc.ShadowMode
			d.quota = d.quota || d.desc.QuotaMode
			if !d.desc.Bounded {
				r.Overflow = overflowKey(req.Domain, d.desc)
			}
		}
		r.Shadow = d.shadow || d.quota
		if params != nil {
			params[i] = referenceParams(d.lim.Params)
			if r.Act == limit.Defer {
				// hits_addend 0: OK while the count is not over the
				// limit, as theirs, rather than while one more fits.
				params[i].Limit++
			}
			r.Params = &params[i]
			// Each limit on its own: none takes part in the others'
			// decision, and each counts when it admits. With
			// StopOverLimitCount, as in envoyproxy/ratelimit, a request
			// over any limit is counted against none: all or nothing.
			r.Shadow = r.Shadow || !s.cfg.StopOverLimitCount
		}
		reqs = append(reqs, r)
	}
	res := make([]limit.Result, len(reqs))
	allowed, how := true, outcome(0)
	if len(reqs) > 0 {
		var err error
		if s.cfg.ReferenceCounting {
			how, err = s.decideReference(ctx, now, reqs, res)
		} else {
			allowed, how, err = s.decide(ctx, now, reqs, res)
		}
		if err != nil {
			return nil, nil, err
		}
		if s.cfg.ReferenceCounting {
			allowed = true
			for i := range ds {
				if d := &ds[i]; d.req >= 0 && !res[d.req].Allowed && !d.shadow && !d.quota {
					allowed = false
				}
			}
		}
	}
	return s.respond(req, domLabel, ds, reqs, res, allowed, how, now), ds, nil
}

// ownValues reports whether m counts every entry under its own value: a
// limit override shares the configured descriptor's counter only then,
// as envoyproxy/ratelimit keys an override by the request's values, never
// by a share_threshold wildcard.
func ownValues(m *rlsconfig.Match, es []rlsconfig.Entry) bool {
	for i, e := range es {
		if m.CounterValue(i, e.Value) != e.Value {
			return false
		}
	}
	return true
}

// referenceParams returns p as envoyproxy/ratelimit counts it: a fixed
// window of p's unit aligned to the Unix epoch (a month of 30 days, no
// calendar), with none of this gateway's extensions.
func referenceParams(p limit.Params) limit.Params {
	return limit.Params{Algorithm: "fixed_window", Limit: p.Limit, Window: p.Window}
}

// decideReference decides reqs as envoyproxy/ratelimit counts them: each
// on its own, and the hits over a limit counted too (chargeOverLimit),
// unless StopOverLimitCount. A counter the request names more than once
// is decided once per naming, in turn, each after the hits of those
// before it, as their pipeline of INCRBYs counts them; how is the fail
// mode's outcome of the last turn it decided.
func (s *Service) decideReference(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (how outcome, err error) {
	turn := make([]int, len(reqs)) // how many times reqs[i]'s key came before it
	turns := 1
	if !s.cfg.StopOverLimitCount && len(reqs) > 1 && limit.Repeats(reqs) {
		for i := range reqs {
			for j := range i {
				if reqs[j].Key == reqs[i].Key {
					turn[i]++
				}
			}
			turns = max(turns, turn[i]+1)
		}
	}
	for t := range turns {
		var idx []int
		for i := range reqs {
			if turn[i] == t {
				idx = append(idx, i)
			}
		}
		rq, rr := reqs, res
		if turns > 1 {
			rq, rr = make([]limit.Request, len(idx)), make([]limit.Result, len(idx))
			for j, i := range idx {
				rq[j] = reqs[i]
			}
		}
		_, h, err := s.decide(ctx, now, rq, rr)
		if err != nil {
			return 0, err
		}
		if h != 0 {
			how = h
		} else if !s.cfg.StopOverLimitCount {
			s.chargeOverLimit(ctx, now, rq, rr)
		}
		if turns > 1 {
			for j, i := range idx {
				res[i] = rr[j]
			}
		}
	}
	return how, nil
}

// chargeOverLimit counts the hits of the requests that a limit denied
// against that limit, as envoyproxy/ratelimit counts every hit. The
// decision is made: a store error leaves them to the store (the Redis
// store counts them late, or drops and counts them: docs/fleet.md, "A
// slow Redis costs once").
func (s *Service) chargeOverLimit(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) {
	var charges []limit.Request
	for i := range reqs {
		if !res[i].Allowed && reqs[i].Act != limit.Defer {
			c := reqs[i]
			c.Act, c.Shadow = limit.Charge, false
			charges = append(charges, c)
		}
	}
	if len(charges) == 0 {
		return
	}
	cres := make([]limit.Result, len(charges))
	if _, err := s.cfg.Store.Allow(ctx, now, charges, cres); err != nil {
		s.log.Debug("counting hits over the limit", "err", err)
	}
}

// decide asks the store through the failover, which applies the fail
// mode when it fails: how is 0 when the store decided, else the fail
// mode's outcome. Under FailLocal each limit is scaled by LocalShare;
// under FailOpen and FailClosed the results are filled here.
func (s *Service) decide(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, outcome, error) {
	var scaled []limit.Params
	local := func(i int) *limit.Params {
		if s.cfg.LocalShare >= 1 {
			return reqs[i].Params
		}
		if scaled == nil {
			scaled = make([]limit.Params, len(reqs))
		}
		scaled[i] = reqs[i].Params.Scaled(s.cfg.LocalShare)
		return &scaled[i]
	}
	dctx, traced := startDecision(ctx)
	allowed, v, _ := s.failover.Allow(dctx, now, reqs, res, local)
	traced(v)
	if v == failmode.StoreDecided {
		return allowed, 0, nil
	}
	// A call decided locally is counted (and reaches the fleet through
	// the store's journal): it gets its answer, even if its caller has
	// stopped waiting for it. Only an undecided one is the caller's
	// cancellation.
	if ctx.Err() != nil && v != failmode.LocalDecided {
		return false, 0, status.FromContextError(ctx.Err()).Err()
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.StoreError()
	}
	switch v {
	case failmode.LocalDecided:
		return allowed, outFailLocal, nil
	case failmode.FailedOpen:
		for i := range reqs {
			p := reqs[i].Params
			res[i] = limit.Result{Allowed: true, Limit: p.Limit, Remaining: p.Limit, Reset: 0}
		}
		return true, outFailOpen, nil
	default: // FailedClosed
		allowed := true
		for i := range reqs {
			p := reqs[i].Params
			res[i] = limit.Result{Allowed: false, Limit: p.Limit, Reset: p.Window, RetryAfter: p.Window}
			if !reqs[i].Shadow {
				allowed = false
			}
		}
		return allowed, outFailClosed, nil
	}
}
