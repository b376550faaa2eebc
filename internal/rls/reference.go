package rls

import (
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// referenceHeaders returns envoyproxy/ratelimit's three headers
// (LIMIT_RESPONSE_HEADERS_ENABLED) as it picks them: of the status with a
// limit that has the least remaining, or of the last limit that denied;
// the reset is the end of that limit's window. None when no limit
// applied.
func referenceHeaders(names *HeaderNames, ds []decision, sts []*rlsv3.RateLimitResponse_DescriptorStatus, now time.Time) []*corev3.HeaderValue {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range sts {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && !ds[i].quota {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return nil
	}
	w, _ := rlsconfig.UnitDuration(pick.CurrentLimit.Unit)
	return []*corev3.HeaderValue{
		{Key: names.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: names.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: names.Reset, Value: strconv.FormatInt(int64(windowEnd(now, w)/time.Second), 10)},
	}
}

// dynamicMetadata returns the dynamic metadata envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA returns: the domain, each descriptor's
// entries ("key=value"), limit override and hits_addend, the request's
// hits_addend, the indexes of the descriptors whose quota the request
// went over, and whether any limit that applied is a quota.
func dynamicMetadata(req *rlsv3.RateLimitRequest, ds []decision, violations []int) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", o.GetRequestsPerUnit(), o.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if len(violations) > 0 {
		vs := make([]*structpb.Value, len(violations))
		for i, v := range violations {
			vs[i] = structpb.NewNumberValue(float64(v))
		}
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	quota := false
	for i := range ds {
		if ds[i].lim != nil && ds[i].skip == 0 && ds[i].quota {
			quota = true
		}
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	return &structpb.Struct{Fields: fields}
}
