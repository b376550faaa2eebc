package rls

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// The service's part in tracing (docs/operations.md, "Traces"): the gRPC
// server span of a ShouldRateLimit call is the stats handler's
// (otelgrpc), from the trace context Envoy sends in the call's metadata;
// the service adds a span per store decision, and Traces writes the
// domain, the descriptors and the decision on the call's span.

// Traces writes each traced call's domain, descriptors (values hashed
// unless RawValues, as the access log writes them) and decision on its
// server span, with an event per descriptor. The zero value hashes
// without a secret, as tests do; it is safe for concurrent use.
type Traces struct {
	// RawValues writes descriptor values as they are (--access-log-keys).
	RawValues bool
	// Hasher hashes them as the access log and /top do, under the
	// secret of --key-hash-secret-file (observe.KeyHasher).
	Hasher *observe.KeyHasher
}

// ObserveCall implements Observer.
func (t *Traces) ObserveCall(c *Call) {
	s := c.Span
	if s == nil || !s.IsRecording() {
		return
	}
	req := c.Request
	descs := req.GetDescriptors()
	paths := make([]string, 0, min(len(descs), MaxDescriptors))
	var b strings.Builder
	for i, d := range descs {
		if i == MaxDescriptors {
			break
		}
		b.Reset()
		for j, e := range d.GetEntries() {
			if j == MaxEntries {
				break
			}
			if j > 0 {
				b.WriteByte(',')
			}
			v := e.GetValue()
			if t.RawValues {
				v = cut(v)
			} else {
				v = t.Hasher.Hash(v)
			}
			b.WriteString(cut(e.GetKey()))
			b.WriteByte('=')
			b.WriteString(v)
		}
		paths = append(paths, b.String())
	}
	attrs := []attribute.KeyValue{
		attribute.String(tracing.AttrDomain, req.GetDomain()),
		attribute.StringSlice(tracing.AttrDescriptors, paths),
	}
	if c.Err != nil {
		s.SetAttributes(append(attrs, attribute.String(tracing.AttrDecision, status.Code(c.Err).String()))...)
		return
	}
	s.SetAttributes(append(attrs, attribute.String(tracing.AttrDecision, c.Response.GetOverallCode().String()))...)
	for i, st := range c.Response.GetStatuses() {
		if i >= len(c.ds) {
			break
		}
		d := &c.ds[i]
		ev := []attribute.KeyValue{attribute.String("ratelimit.code", st.GetCode().String())}
		switch {
		case d.desc != nil:
			ev = append(ev, attribute.String(tracing.AttrPolicy, d.desc.Path))
		case d.label != "":
			ev = append(ev, attribute.String(tracing.AttrPolicy, d.label))
		}
		if l := st.GetCurrentLimit(); l != nil {
			ev = append(ev,
				attribute.Int64(tracing.AttrQuota, int64(l.GetRequestsPerUnit())),
				attribute.String("ratelimit.unit", strings.ToLower(l.GetUnit().String())),
				attribute.Int64(tracing.AttrRemaining, int64(st.GetLimitRemaining())),
				attribute.Float64(tracing.AttrReset, st.GetDurationUntilReset().AsDuration().Seconds()),
			)
		}
		s.AddEvent(tracing.EventLimit, trace.WithAttributes(ev...))
	}
}

var _ Observer = (*Traces)(nil)

// startDecision starts the span of a store decision when the call's span
// records; end, never nil, ends it with who decided.
func startDecision(ctx context.Context) (context.Context, func(failmode.Verdict)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func(failmode.Verdict) {}
	}
	ctx, span := tracing.StartDecision(ctx)
	return ctx, func(v failmode.Verdict) {
		span.SetAttributes(attribute.String(tracing.AttrDecidedBy, v.String()))
		if v != failmode.StoreDecided {
			span.SetStatus(codes.Error, "the store failed: decided by the fail mode")
		}
		span.End()
	}
}
