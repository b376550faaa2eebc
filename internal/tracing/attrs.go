package tracing

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The span and event names and the attributes of the gateway's
// decisions. Rate limiting has no OpenTelemetry semantic conventions yet
// (open-telemetry/semantic-conventions#3361): these are the gateway's
// proposal, in the ratelimit namespace Limitador uses, with the IETF
// RateLimit header draft's words (policy, quota, window, remaining,
// reset); docs/operations.md, "Traces", lists them. HTTP attributes follow
// the stable HTTP semantic conventions.
const (
	// SpanDecide is the span of one decision of the store (two when a
	// request waited for room and was decided again).
	SpanDecide = "ratelimit.decide"
	// EventLimit is an event of SpanDecide per limit decided.
	EventLimit = "ratelimit.limit"
	// EventWait is an event of the server span: the request waited for
	// room (maxDelay) for AttrWait seconds.
	EventWait = "ratelimit.wait"
	// EventRetry is an event of the upstream client span: a target of a
	// pool failed before the request reached it, and another is tried.
	EventRetry = "upstream.retry"

	// AttrDecision is the decision, the access log's and the metrics'
	// label: allowed, limited, shadow_limited, unmatched, invalid,
	// fail_open, fail_closed, unauthorized, concurrency_limited; for rls
	// the overall code, OK or OVER_LIMIT.
	AttrDecision = "ratelimit.decision"
	// AttrDecidedBy is who decided: store, or when the store failed the
	// fail mode (local, fail_open, fail_closed).
	AttrDecidedBy = "ratelimit.decided_by"
	// AttrStore is the counter store: memory or redis.
	AttrStore = "ratelimit.store"
	// AttrSource is how the Redis store decided: lease (from tokens the
	// gateway leased earlier, no call to Redis), redis (a script call),
	// deny_cache (a key known to be full, no call).
	AttrSource = "ratelimit.source"
	// AttrPolicy names a limit as the RateLimit-Policy header does:
	// app and rule ("app-1/v1/user"); for rls the descriptor path.
	AttrPolicy = "ratelimit.policy"
	// AttrQuota is the limit; AttrWindow its window in seconds.
	AttrQuota  = "ratelimit.quota"
	AttrWindow = "ratelimit.window"
	// AttrRemaining is what the limit has left after the decision;
	// AttrReset the seconds until it is full again; AttrRetryAfter the
	// seconds until a refused request would be admitted.
	AttrRemaining  = "ratelimit.remaining"
	AttrReset      = "ratelimit.reset"
	AttrRetryAfter = "ratelimit.retry_after"
	// AttrAllowed reports whether the limit admitted the request;
	// AttrShadow whether it is a shadow (dry-run) limit.
	AttrAllowed = "ratelimit.allowed"
	AttrShadow  = "ratelimit.shadow"
	// AttrBy is what the limit's counters are shared by (app, ip, global,
	// header:NAME, ...).
	AttrBy = "ratelimit.by"
	// AttrKeyHash prefixes the hash of a value a limit counts by, and
	// AttrKey the value itself when raw (as the access log's key_hash.
	// and key. fields): "ratelimit.key_hash.header:X-User-Id".
	AttrKeyHash = "ratelimit.key_hash."
	AttrKey     = "ratelimit.key."
	// AttrWait is the seconds a request waited for room.
	AttrWait = "ratelimit.wait"
	// AttrDomain and AttrDescriptors are an rls call's domain and
	// descriptors ("key=value,key=value", values hashed unless raw).
	AttrDomain      = "ratelimit.domain"
	AttrDescriptors = "ratelimit.descriptors"

	// The gateway's own: the caller's app (the metrics label: a
	// configured app ID or "*"), the app ID it sent, the route and the
	// upstream pool.
	AttrApp      = "gateway.app"
	AttrAppID    = "gateway.app_id"
	AttrRoute    = "gateway.route"
	AttrUpstream = "gateway.upstream"
)

// serverAttrs are the server span's attributes known when the request
// arrives.
func serverAttrs(r *http.Request, store string) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	proto := "1.1"
	switch r.ProtoMajor {
	case 2:
		proto = "2"
	case 1:
		if r.ProtoMinor == 0 {
			proto = "1.0"
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.scheme", scheme),
		attribute.String("server.address", r.Host),
		attribute.String("network.protocol.version", proto),
	}
	if store != "" {
		attrs = append(attrs, attribute.String(AttrStore, store))
	}
	return attrs
}

// StartDecision starts the span of a store decision under the span in
// ctx, which must be recording.
func StartDecision(ctx context.Context) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Scope).Start(ctx, SpanDecide)
}

// Limit is one limit's part in a decision, for EndDecision.
type Limit struct {
	// Policy names the limit ("app-1/v1/user"); By is what its counters
	// are shared by.
	Policy, By       string
	Quota, Remaining int64
	Window, Reset    time.Duration
	RetryAfter       time.Duration
	Allowed, Shadow  bool
}

// EndDecision ends a decision span with the decision, who decided, and
// an event per limit.
func EndDecision(span trace.Span, decision, decidedBy string, lims []Limit) {
	span.SetAttributes(attribute.String(AttrDecision, decision), attribute.String(AttrDecidedBy, decidedBy))
	for _, l := range lims {
		attrs := []attribute.KeyValue{
			attribute.String(AttrPolicy, l.Policy),
			attribute.Int64(AttrQuota, l.Quota),
			attribute.Float64(AttrWindow, l.Window.Seconds()),
			attribute.Int64(AttrRemaining, l.Remaining),
			attribute.Float64(AttrReset, l.Reset.Seconds()),
			attribute.Bool(AttrAllowed, l.Allowed),
			attribute.Bool(AttrShadow, l.Shadow),
		}
		if l.By != "" {
			attrs = append(attrs, attribute.String(AttrBy, l.By))
		}
		if !l.Allowed {
			attrs = append(attrs, attribute.Float64(AttrRetryAfter, l.RetryAfter.Seconds()))
		}
		span.AddEvent(EventLimit, trace.WithAttributes(attrs...))
	}
	if decidedBy != "store" {
		span.SetStatus(codes.Error, "the store failed: decided by the fail mode")
	}
	span.End()
}

// Waited records on the recording span s that its request waited d for
// room.
func Waited(s trace.Span, d time.Duration) {
	s.AddEvent(EventWait, trace.WithAttributes(attribute.Float64(AttrWait, d.Seconds())))
}

// Source records on the span in ctx, if it is recording, how the Redis
// store decided (AttrSource).
func Source(ctx context.Context, source string) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(attribute.String(AttrSource, source))
	}
}

// StartUpstream starts the client span of the request out sent to the
// upstream, under the recording span in ctx.
func StartUpstream(ctx context.Context, out *http.Request) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", out.Method),
		attribute.String("server.address", out.URL.Hostname()),
		attribute.String("url.full", out.URL.Scheme+"://"+out.URL.Host+out.URL.Path),
	}
	if p := out.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			attrs = append(attrs, attribute.Int("server.port", n))
		}
	}
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Scope).Start(ctx, out.Method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// EndUpstream ends an upstream client span with the response's status,
// or with the error kind (timeout, refused, failed, client_closed) of a
// request that got none.
func EndUpstream(span trace.Span, status int, errKind string) {
	if errKind != "" {
		span.SetAttributes(attribute.String("error.type", errKind))
		span.SetStatus(codes.Error, errKind)
	} else {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 400 {
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// Retried records on the upstream span in ctx, if it is recording, that
// target failed before the request reached it and another is tried.
func Retried(ctx context.Context, target string, err error) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.AddEvent(EventRetry, trace.WithAttributes(
			attribute.String("server.address", target),
			attribute.String("error.message", err.Error()),
		))
	}
}
