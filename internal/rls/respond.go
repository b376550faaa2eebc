package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"google.golang.org/protobuf/types/known/durationpb"
)

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
	var later []int64
	if !s.cfg.ReferenceCounting || s.cfg.StopOverLimitCount {
		// Counting as theirs, the repeats were decided in turn
		// (decideReference): each Result is its own already.
		later = laterHits(reqs)
	}
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
			remaining := r.Remaining
			if r.Allowed && later != nil {
				// A counter the request names again later: what is left
				// of it after this descriptor, as envoyproxy/ratelimit
				// counts repeats one after the other.
				remaining += later[d.req]
			}
			if s.cfg.ReferenceCounting && q.Act == limit.Defer {
				remaining-- // its limit was raised by one (shouldRateLimit)
			}
			st.LimitRemaining = uint32(min(max(remaining, 0), math.MaxUint32))
			if !r.Allowed && s.cfg.ReferenceCounting {
				st.LimitRemaining = 0 // its hits are counted: none is left
			}
			// Whole seconds, as envoyproxy/ratelimit reports them; a
			// request that can never fit waits for the window's end, as
			// every request does when counting as theirs.
			reset := time.Duration(ratelimitheader.Seconds(r.Reset)) * time.Second
			if q.Cost > q.Params.Capacity() || s.cfg.ReferenceCounting {
				reset = windowEnd(now, d.lim.Params.Window)
			}
			st.DurationUntilReset = durationpb.New(reset)
			switch {
			case r.Allowed:
				out = outOK
			case d.quota && (d.desc == nil || !d.desc.ShadowMode):
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
			m.Descriptor(domLabel, d.label, out.String(), d.hits)
		}
	}
	if m != nil {
		m.Call(domLabel, strings.ToLower(resp.OverallCode.String()))
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

// laterHits returns, for each request, the hits of the requests after it
// that name the same counter; nil when no counter is named twice.
func laterHits(reqs []limit.Request) []int64 {
	if len(reqs) < 2 || !limit.Repeats(reqs) {
		return nil
	}
	later := make([]int64, len(reqs))
	for i := range reqs {
		for j := i + 1; j < len(reqs); j++ {
			if reqs[j].Key == reqs[i].Key && reqs[j].Act != limit.Defer {
				later[i] += reqs[j].Cost
			}
		}
	}
	return later
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

// headers returns the headers for Envoy to add to the response: the
// rate-limit headers `gateway serve` sends (docs/rules.md, "Responses")
// for the limits that applied, shadow limits left out.
func (s *Service) headers(ds []decision, res []limit.Result) []*corev3.HeaderValue {
	mode := s.cfg.Headers
	if mode == ratelimitheader.None {
		return nil
	}
	most := -1
	for i := range ds {
		if ds[i].req < 0 || ds[i].shadow || ds[i].quota {
			continue
		}
		if most < 0 || ratelimitheader.MoreConstraining(res[ds[i].req], res[ds[most].req]) {
			most = i
		}
	}
	if most < 0 {
		return nil
	}
	var out []*corev3.HeaderValue
	if mode.Draft() {
		var policy, state []byte
		for i := range ds {
			d := &ds[i]
			if d.req < 0 || d.shadow || d.quota {
				continue
			}
			r := res[d.req]
			name := ratelimitheader.Quote(policyName(d))
			if len(policy) > 0 {
				policy = append(policy, ", "...)
				state = append(state, ", "...)
			}
			policy = ratelimitheader.AppendPolicy(policy, name, d.lim.Params.Limit, d.lim.Params.Window)
			state = ratelimitheader.AppendState(state, name, r.Remaining, r.Reset, d.lim.Params.Limit == 0)
		}
		out = append(out,
			&corev3.HeaderValue{Key: "RateLimit-Policy", Value: string(policy)},
			&corev3.HeaderValue{Key: "RateLimit", Value: string(state)})
	}
	if mode.Legacy() {
		d, r := &ds[most], res[ds[most].req]
		out = append(out,
			&corev3.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(d.lim.Params.Limit, 10)},
			&corev3.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatInt(max(r.Remaining, 0), 10)})
		if d.lim.Params.Limit > 0 {
			out = append(out, &corev3.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(ratelimitheader.Seconds(r.Reset), 10)})
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
