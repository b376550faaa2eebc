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
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
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
	Headers proxy.HeaderMode
	// ShadowMode makes every limit a shadow limit, as envoyproxy/ratelimit's
	// SHADOW_MODE does: limits are decided, counted when they admit and
	// reported (a status says OVER_LIMIT where the limit would deny), but
	// the overall code is always OK. For trying the service on live
	// traffic before it enforces anything.
	ShadowMode bool
	// Metrics, if not nil, counts decisions.
	Metrics *Metrics
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
			if m, ok := dom.Find(es); ok && len(es) > 0 && !m.Descriptor.Limit.Unlimited && m.Descriptor.Limit.Params.Window == lim.Params.Window {
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
			Params: &d.lim.Params, Cost: max(d.hits, 1), Defer: d.hits == 0,
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
		allowed, how, err = s.decide(ctx, now, reqs, res)
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
			if how == 0 && !s.cfg.StopOverLimitCount {
				s.chargeOverLimit(ctx, now, reqs, res)
			}
		}
	}
	return s.respond(req, domLabel, ds, reqs, res, allowed, how, now), ds, nil
}

// referenceParams returns p as envoyproxy/ratelimit counts it: a fixed
// window of p's unit aligned to the Unix epoch (a month of 30 days, no
// calendar), with none of this gateway's extensions.
func referenceParams(p limit.Params) limit.Params {
	return limit.Params{Algorithm: "fixed_window", Limit: p.Limit, Window: p.Window}
}

// chargeOverLimit counts the hits of the requests that a limit denied
// against that limit, as envoyproxy/ratelimit counts every hit. The
// decision is made: a store error only leaves them uncounted.
func (s *Service) chargeOverLimit(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) {
	var charges []limit.Request
	for i := range reqs {
		if !res[i].Allowed && !reqs[i].Defer {
			c := reqs[i]
			c.Charge, c.Shadow = true, false
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
		s.cfg.Metrics.storeErrors.Inc()
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

// respond builds the response of the decided request.
func (s *Service) respond(req *rlsv3.RateLimitRequest, domLabel string, ds []decision, reqs []limit.Request, res []limit.Result, allowed bool, how outcome, now time.Time) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	if !allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	m := s.cfg.Metrics
	var violations []int // the quotas the request went over
	for i := range ds {
		d := &ds[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		var out outcome
		switch {
		case d.lim == nil:
			out = outNoLimit
		case d.skip == outUnlimited:
			st.LimitRemaining = math.MaxUint32
			out = outUnlimited
		case d.skip != 0:
			out = d.skip
		default:
			r, q := &res[d.req], &reqs[d.req]
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name: d.lim.Name, RequestsPerUnit: d.lim.RequestsPerUnit, Unit: d.lim.Unit,
			}
			st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
			if !r.Allowed && s.cfg.ReferenceCounting {
				st.LimitRemaining = 0 // its hits are counted: none is left
			}
			// Whole seconds, as envoyproxy/ratelimit reports them; a
			// request that can never fit waits for the window's end.
			reset := time.Duration(ceilSeconds(r.Reset)) * time.Second
			if q.Cost > q.Params.Capacity() {
				reset = windowEnd(now, d.lim.Params.Window)
			}
			st.DurationUntilReset = durationpb.New(reset)
			switch {
			case r.Allowed:
				out = outOK
			case d.quota:
				// A quota over its limit is OK with what is left of it,
				// and told in the dynamic metadata.
				out = outShadow
				st.DurationUntilReset = nil
				violations = append(violations, i)
			case d.shadow:
				out = outShadow
				if d.desc == nil || !d.desc.ShadowMode {
					// Shadowed by ShadowMode alone: the status tells.
					st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				}
			default:
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				out = outOverLimit
			}
			if how != 0 {
				out = how
			}
		}
		if m != nil && d.lim != nil {
			m.observe(domLabel, d.label, out, d.hits)
		}
	}
	if m != nil {
		m.requests.WithLabelValues(domLabel, strings.ToLower(resp.OverallCode.String())).Inc()
	}
	resp.ResponseHeadersToAdd = s.headers(ds, res)
	if s.cfg.ReferenceHeaders != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, referenceHeaders(s.cfg.ReferenceHeaders, ds, resp.Statuses, now)...)
	}
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, ds, violations)
	}
	return resp
}

// windowEnd returns the time from now to the end of the window of length
// w aligned to the Unix epoch, in whole seconds, as envoyproxy/ratelimit
// reports every reset.
func windowEnd(now time.Time, w time.Duration) time.Duration {
	sec := max(int64(w/time.Second), 1)
	return time.Duration(sec-now.Unix()%sec) * time.Second
}

// hitsOf returns the units descriptor d asks for: its own hits_addend
// when set (0 checks without counting), else the request's, 0 meaning 1
// as in envoyproxy/ratelimit. It is capped just above the largest limit,
// which such a request exceeds anyway.
func hitsOf(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), limit.MaxLimit+1))
	}
	return int64(min(max(uint64(req.GetHitsAddend()), 1), limit.MaxLimit+1))
}

// overrideLimit returns the limit of a descriptor's limit override (the
// limit Envoy's rate-limit action can carry, from route metadata), with
// the default algorithm.
func overrideLimit(o *rlv3.RateLimitDescriptor_RateLimitOverride) (*rlsconfig.Limit, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	w, ok := rlsconfig.UnitDuration(unit)
	if !ok {
		return nil, fmt.Errorf("limit override has unit %v: use SECOND to YEAR", unit)
	}
	if int64(o.GetRequestsPerUnit()) > limit.MaxLimit {
		return nil, fmt.Errorf("limit override of %d is above the largest limit, %d", o.GetRequestsPerUnit(), int64(limit.MaxLimit))
	}
	return &rlsconfig.Limit{
		RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit,
		Params: limit.Params{Algorithm: limit.DefaultAlgorithm, Limit: int64(o.GetRequestsPerUnit()), Window: w, Precision: limit.DefaultPrecision},
	}, nil
}

// tagPrefix starts the Tag of every key: one request's keys share the
// domain's tag, so that the Redis store decides them in one script call
// (in one Redis Cluster slot), all or nothing.
const tagPrefix = "rls:"

// keyEscaper keeps the separators of counterKey out of keys and values.
var keyEscaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

// counterKey names the counter of a descriptor: its domain and every
// entry's key and value (for share_threshold, the wildcard instead of
// the value), as envoyproxy/ratelimit's cache keys do, so that a reload
// that keeps a descriptor keeps its count. A limit override shares the
// counter of the configured descriptor its entries match when it has the
// same unit, as envoyproxy/ratelimit's keys (domain, entries and window)
// make it; otherwise its counter is its own, by unit.
func counterKey(domain string, es []*rlv3.RateLimitDescriptor_Entry, d *decision) string {
	var b strings.Builder
	b.WriteString("rls|")
	b.WriteString(keyEscaper.Replace(domain))
	m := &d.match
	switch {
	case d.shared != nil:
		m = d.shared
	case d.desc == nil:
		b.WriteString("|override|")
		b.WriteString(strings.ToLower(d.lim.Unit.String()))
		m = nil
	}
	for i, e := range es {
		b.WriteByte('|')
		b.WriteString(keyEscaper.Replace(e.GetKey()))
		b.WriteByte('=')
		v := e.GetValue()
		if m != nil {
			v = m.CounterValue(i, v)
		}
		b.WriteString(keyEscaper.Replace(v))
	}
	return b.String()
}

// overflowKey is the counter that new per-value counters of desc share
// once the store holds its most keys.
func overflowKey(domain string, desc *rlsconfig.Descriptor) string {
	return "rls|" + keyEscaper.Replace(domain) + "|~overflow|" + keyEscaper.Replace(desc.Path)
}

// headers returns the headers for Envoy to add to the response: those of
// proxy's rate-limit headers (docs/rules.md, "Responses") for the limits that
// applied, shadow limits left out.
func (s *Service) headers(ds []decision, res []limit.Result) []*corev3.HeaderValue {
	mode := s.cfg.Headers
	if mode == proxy.HeadersNone {
		return nil
	}
	most := -1
	for i := range ds {
		if ds[i].req < 0 || ds[i].shadow || ds[i].quota {
			continue
		}
		if most < 0 || moreConstraining(res[ds[i].req], res[ds[most].req]) {
			most = i
		}
	}
	if most < 0 {
		return nil
	}
	var out []*corev3.HeaderValue
	if mode == proxy.HeadersBoth || mode == proxy.HeadersDraft {
		var policy, state []byte
		for i := range ds {
			d := &ds[i]
			if d.req < 0 || d.shadow || d.quota {
				continue
			}
			r := res[d.req]
			name := sfString(policyName(d))
			if len(policy) > 0 {
				policy = append(policy, ", "...)
				state = append(state, ", "...)
			}
			policy = append(append(policy, name...), ";q="...)
			policy = strconv.AppendInt(policy, d.lim.Params.Limit, 10)
			policy = strconv.AppendInt(append(policy, ";w="...), ceilSeconds(d.lim.Params.Window), 10)
			state = append(append(state, name...), ";r="...)
			state = strconv.AppendInt(state, max(r.Remaining, 0), 10)
			if d.lim.Params.Limit > 0 {
				state = strconv.AppendInt(append(state, ";t="...), ceilSeconds(r.Reset), 10)
			}
		}
		out = append(out,
			&corev3.HeaderValue{Key: "RateLimit-Policy", Value: string(policy)},
			&corev3.HeaderValue{Key: "RateLimit", Value: string(state)})
	}
	if mode == proxy.HeadersBoth || mode == proxy.HeadersLegacy {
		d, r := &ds[most], res[ds[most].req]
		out = append(out,
			&corev3.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(d.lim.Params.Limit, 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatInt(max(r.Remaining, 0), 10)})
		if d.lim.Params.Limit > 0 {
			out = append(out, &corev3.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(ceilSeconds(r.Reset), 10)})
		}
	}
	return out
}

// policyName names a limit in the draft headers: its name, else its
// descriptor's path.
func policyName(d *decision) string {
	switch {
	case d.lim.Name != "":
		return d.lim.Name
	case d.desc != nil:
		return d.desc.Path
	}
	return "override"
}

// sfString quotes s as a structured-field string (RFC 8941 §3.3.3),
// replacing what it cannot hold with "?".
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// moreConstraining reports whether a leaves less room than b: denied
// first, then fewer remaining, then a longer wait.
func moreConstraining(a, b limit.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
