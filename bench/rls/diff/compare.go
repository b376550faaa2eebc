package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

type answer struct {
	resp *rlsv3.RateLimitResponse
	err  error
}

// compare returns how gw's answer differs from ref's.
func compare(ref, gw answer, headers bool) []string {
	var out []string
	if ref.err != nil || gw.err != nil {
		if status.Code(ref.err) != status.Code(gw.err) {
			out = append(out, fmt.Sprintf("error: ref %v, gateway %v", status.Code(ref.err), status.Code(gw.err)))
		}
		return out
	}
	a, b := ref.resp, gw.resp
	if a.GetOverallCode() != b.GetOverallCode() {
		out = append(out, fmt.Sprintf("overall: ref %v, gateway %v", a.GetOverallCode(), b.GetOverallCode()))
	}
	if len(a.GetStatuses()) != len(b.GetStatuses()) {
		return append(out, fmt.Sprintf("statuses: ref %d, gateway %d", len(a.GetStatuses()), len(b.GetStatuses())))
	}
	for i, sa := range a.GetStatuses() {
		sb := b.GetStatuses()[i]
		if sa.GetCode() != sb.GetCode() {
			out = append(out, fmt.Sprintf("[%d].code: ref %v, gateway %v", i, sa.GetCode(), sb.GetCode()))
		}
		if !proto.Equal(sa.GetCurrentLimit(), sb.GetCurrentLimit()) {
			out = append(out, fmt.Sprintf("[%d].current_limit: ref {%v}, gateway {%v}", i, sa.GetCurrentLimit(), sb.GetCurrentLimit()))
		}
		if sa.GetLimitRemaining() != sb.GetLimitRemaining() {
			out = append(out, fmt.Sprintf("[%d].limit_remaining: ref %d, gateway %d", i, sa.GetLimitRemaining(), sb.GetLimitRemaining()))
		}
		ra, rb := sa.GetDurationUntilReset(), sb.GetDurationUntilReset()
		if (ra == nil) != (rb == nil) || ra.GetSeconds() != rb.GetSeconds() || ra.GetNanos() != rb.GetNanos() {
			out = append(out, fmt.Sprintf("[%d].duration_until_reset: ref %s, gateway %s", i, dur(ra.AsDuration(), ra != nil), dur(rb.AsDuration(), rb != nil)))
		}
	}
	if ma, mb := spaced(a.GetDynamicMetadata()), spaced(b.GetDynamicMetadata()); !proto.Equal(ma, mb) {
		ja, _ := protojson.Marshal(ma)
		jb, _ := protojson.Marshal(mb)
		out = append(out, fmt.Sprintf("dynamic_metadata: ref %s, gateway %s", ja, jb))
	}
	if headers && !equalHeaders(a, b) {
		out = append(out, fmt.Sprintf("headers: ref %v, gateway %v", a.GetResponseHeadersToAdd(), b.GetResponseHeadersToAdd()))
	}
	return out
}

// spaced returns m with every run of spaces in its strings made one:
// envoyproxy/ratelimit writes a limit override in protobuf's text format,
// whose Go implementation varies the spacing on purpose, so that no one
// depends on it (protobuf-go's internal/detrand).
func spaced(m *structpb.Struct) *structpb.Struct {
	if m == nil {
		return nil
	}
	m = proto.Clone(m).(*structpb.Struct)
	var walk func(v *structpb.Value)
	walk = func(v *structpb.Value) {
		switch k := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			k.StringValue = strings.Join(strings.Fields(k.StringValue), " ")
		case *structpb.Value_ListValue:
			for _, e := range k.ListValue.GetValues() {
				walk(e)
			}
		case *structpb.Value_StructValue:
			for _, e := range k.StructValue.GetFields() {
				walk(e)
			}
		}
	}
	for _, v := range m.GetFields() {
		walk(v)
	}
	return m
}

func dur(d time.Duration, ok bool) string {
	if !ok {
		return "none"
	}
	return d.String()
}

func equalHeaders(a, b *rlsv3.RateLimitResponse) bool {
	flat := func(r *rlsv3.RateLimitResponse) []string {
		var s []string
		for _, h := range r.GetResponseHeadersToAdd() {
			s = append(s, h.GetKey()+": "+h.GetValue())
		}
		sort.Strings(s)
		return s
	}
	return slices.Equal(flat(a), flat(b))
}
