package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the gateway's spans.
const Scope = "github.com/ratelimit-gateway/gateway"

// Tracer is the tracing of one process: the provider, its propagators and
// its export queue. Create it with New when Config.Enabled; it is safe
// for concurrent use.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	queue  *queue
	store  string
}

// New builds the tracer provider of cfg and its OTLP exporter. It fails
// on a setting the SDK cannot use; a receiver that is down is not an
// error (spans are dropped and counted until it answers).
func New(cfg Config) (*Tracer, error) {
	if !cfg.Enabled {
		return nil, errors.New("tracing: New needs Config.Enabled")
	}
	if cfg.Protocol == "" {
		cfg.Protocol = ProtocolHTTP
	}
	if cfg.Sampler == "" {
		cfg.Sampler, cfg.SamplerArg = "parentbased_always_on", 1
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "gateway"
	}
	sampler, err := newSampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		return nil, fmt.Errorf("tracing: sampler %q: %w", cfg.Sampler, err)
	}
	prop, err := newPropagator(cfg.Propagators)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	for k, v := range cfg.Resource {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		res = resource.NewSchemaless(attrs...)
	}
	q := newQueue(exp, cfg)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(q),
	)
	return &Tracer{tp: tp, tracer: tp.Tracer(Scope), prop: prop, queue: q, store: cfg.Store}, nil
}

func newExporter(cfg Config) (*otlptrace.Exporter, error) {
	// The exporter's own retries stop at the export's deadline: the
	// queue, not the exporter, decides what waits.
	ctx := context.Background()
	switch cfg.Protocol {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown OTLP protocol %q: use grpc or http/protobuf", cfg.Protocol)
}

// newSampler returns the sampler OTEL_TRACES_SAMPLER names.
func newSampler(name string, arg float64) (sdktrace.Sampler, error) {
	if arg < 0 || arg > 1 {
		return nil, fmt.Errorf("the ratio %v is outside 0..1", arg)
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg)), nil
	}
	return nil, errors.New("use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}

// newPropagator returns the propagators OTEL_PROPAGATORS names; none
// (or nil) is tracecontext and baggage.
func newPropagator(names []string) (propagation.TextMapPropagator, error) {
	if len(names) == 0 {
		names = []string{"tracecontext", "baggage"}
	}
	var ps []propagation.TextMapPropagator
	for _, n := range names {
		switch n {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "b3":
			ps = append(ps, b3.New(b3.WithInjectEncoding(b3.B3SingleHeader)))
		case "b3multi":
			ps = append(ps, b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)))
		case "none":
		default:
			return nil, fmt.Errorf("unknown propagator %q: use tracecontext, baggage, b3, b3multi or none", n)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// Provider returns the tracer provider, for instrumentation that takes
// one (the gRPC stats handler of rls).
func (t *Tracer) Provider() trace.TracerProvider { return t.tp }

// Propagator returns the propagators requests are read and forwarded
// with.
func (t *Tracer) Propagator() propagation.TextMapPropagator { return t.prop }

// Flush exports the spans ended so far, for tests and shutdown.
func (t *Tracer) Flush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Shutdown exports what is queued, within ctx, and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// Close shuts the tracer down within five seconds: for a process's list
// of closers.
func (t *Tracer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.Shutdown(ctx)
}

// Dropped returns the number of spans dropped because the export queue
// was full.
func (t *Tracer) Dropped() int64 { return t.queue.dropped.Load() }

// Register adds the tracing metrics to reg: spans dropped, exported and
// failed, and the spans queued.
func (t *Tracer) Register(reg prometheus.Registerer) {
	q := t.queue
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_trace_spans_dropped_total",
			Help: "Spans dropped because the export queue was full (the trace receiver down or slow).",
		}, func() float64 { return float64(q.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_trace_spans_exported_total",
			Help: "Spans the trace receiver accepted.",
		}, func() float64 { return float64(q.exported.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_trace_export_failures_total",
			Help: "Exports of a batch of spans that failed (their spans are lost).",
		}, func() float64 { return float64(q.failed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_trace_queue_spans",
			Help: "Spans waiting for export.",
		}, func() float64 { return float64(len(q.ch)) }),
	)
}

// Handler returns next with a server span per request: the trace context
// the request carries (traceparent, tracestate, b3 when configured) is
// its parent, and the span is in the request's context for the request
// path to add to (the decision and upstream spans, and the request's
// outcome, written by observe.Traces). It ends when next returns.
func (t *Tracer) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(serverAttrs(r, t.store)...)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
