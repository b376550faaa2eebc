package proxy

import (
	"net/http"
	"net/http/httputil"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// The request path's part in tracing (docs/operations.md, "Traces"):
// the server span is started before the handler (package tracing) and
// is in the request's context; when it records, the handler puts it on
// the outcome, adds a span per store decision, and the reverse proxy a
// client span per upstream request, whose context goes to the upstream
// in the traceparent header set by Rewrite, as every other edit of the
// upstream's request is. Without a recording span nothing here runs.

// tracedSpan returns the request's server span if it records, else nil.
func tracedSpan(r *http.Request) trace.Span {
	if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
		return s
	}
	return nil
}

// endDecision ends the span of a decision with what decide found.
func endDecision(span trace.Span, sc *scratch) {
	o := &sc.o
	ls := o.Limits()
	// Named as the RateLimit-Policy header names them.
	lims := make([]tracing.Limit, len(ls))
	for i, l := range ls {
		cl, res := sc.lims[i], &sc.res[i]
		lims[i] = tracing.Limit{
			Policy: cl.App + cl.API, By: string(cl.By),
			Quota: l.Limit, Remaining: l.Remaining, Window: cl.Params.Window,
			Reset: res.Reset, RetryAfter: res.RetryAfter, Allowed: l.Allowed, Shadow: l.Shadow,
		}
	}
	tracing.EndDecision(span, o.Decision.String(), sc.decidedBy.String(), lims)
}

// traceUpstream starts the client span of the upstream's request under
// the request's server span, and writes its context (or, when the server
// span does not record, the server span's) into the upstream's request
// with prop. It runs last in Rewrite, once pr.Out's URL is the
// upstream's.
func traceUpstream(pr *httputil.ProxyRequest, prop propagation.TextMapPropagator) {
	ctx := pr.In.Context()
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return
	}
	if parent.IsRecording() {
		var span trace.Span
		ctx, span = tracing.StartUpstream(ctx, pr.Out)
		if f, ok := ctx.Value(forwardKey{}).(*forward); ok && f != nil {
			f.span = span
		}
		pr.Out = pr.Out.WithContext(ctx)
	}
	prop.Inject(ctx, tracing.HeaderCarrier(pr.Out.Header))
}

// endUpstream ends the upstream span of the request behind ctx's forward,
// if any: with status, or with errKind when there was no response.
func endUpstream(r *http.Request, status int, errKind string) {
	if f, ok := r.Context().Value(forwardKey{}).(*forward); ok && f != nil && f.span != nil {
		tracing.EndUpstream(f.span, status, errKind)
		f.span = nil
	}
}
