package tracing_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/tracing/tracingtest"
)

// A client's trace context, as a caller in front of the gateway sends it.
const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan   = "00f067aa0ba902b7"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// newTracer returns a tracer exporting to endpoint over proto that
// samples every trace, shut down when the test ends.
func newTracer(t *testing.T, proto, endpoint string, edit func(*tracing.Config)) *tracing.Tracer {
	t.Helper()
	cfg := tracing.Config{Enabled: true, Protocol: proto, Endpoint: endpoint, Sampler: "always_on", BatchDelay: 10 * time.Millisecond, ServiceName: "gw-test"}
	if edit != nil {
		edit(&cfg)
	}
	tr, err := tracing.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr.Shutdown(ctx)
	})
	return tr
}

// serve runs h behind the tracer's Handler on a test server.
func serve(t *testing.T, tr *tracing.Tracer, h http.HandlerFunc) string {
	srv := httptest.NewServer(tr.Handler(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string, hdr map[string]string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %d, want 200", url, resp.StatusCode)
	}
}

// TestServerSpanOverOTLP exports the server span of a request that
// carries a W3C trace context to a real receiver, over gRPC and over
// HTTP: the span continues the client's trace, is the parent of what
// the handler starts, and carries the resource's service name.
func TestServerSpanOverOTLP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		proto string
		recv  func(testing.TB) *tracingtest.Receiver
	}{
		{name: "grpc", proto: tracing.ProtocolGRPC, recv: tracingtest.NewGRPC},
		{name: "http", proto: tracing.ProtocolHTTP, recv: tracingtest.NewHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := tc.recv(t)
			tr := newTracer(t, tc.proto, rcv.URL, nil)
			url := serve(t, tr, func(w http.ResponseWriter, r *http.Request) {
				_, child := tracing.StartDecision(r.Context())
				child.End()
			})
			get(t, url+"/v1/user", map[string]string{"Traceparent": clientParent})
			spans := rcv.WaitFor(t, "server and decision spans", func(s []tracingtest.Span) bool { return len(s) >= 2 })
			srv, ok := tracingtest.Find(spans, "GET")
			if !ok {
				t.Fatalf("no server span:\n%s", tracingtest.Dump(spans))
			}
			dec, _ := tracingtest.Find(spans, tracing.SpanDecide)
			if srv.TraceID != clientTrace || srv.Parent != clientSpan {
				t.Errorf("server span: got trace %s parent %s, want %s %s", srv.TraceID, srv.Parent, clientTrace, clientSpan)
			}
			if srv.Kind.String() != "SPAN_KIND_SERVER" {
				t.Errorf("server span kind: got %v, want SERVER", srv.Kind)
			}
			if dec.Parent != srv.SpanID || dec.TraceID != clientTrace {
				t.Errorf("decision span: got parent %s in trace %s, want %s in %s", dec.Parent, dec.TraceID, srv.SpanID, clientTrace)
			}
			if got := srv.Resource["service.name"]; got != "gw-test" {
				t.Errorf("service.name: got %v, want gw-test", got)
			}
			if got := srv.Attrs["http.request.method"]; got != "GET" {
				t.Errorf("http.request.method: got %v, want GET", got)
			}
		})
	}
}

// TestB3 reads a B3 single header when b3 is configured.
func TestB3(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewGRPC(t)
	tr := newTracer(t, tracing.ProtocolGRPC, rcv.URL, func(c *tracing.Config) { c.Propagators = []string{"tracecontext", "b3"} })
	url := serve(t, tr, func(w http.ResponseWriter, r *http.Request) {
		// What the upstream would receive.
		h := http.Header{}
		tr.Propagator().Inject(r.Context(), propagationHeader(h))
		if h.Get("B3") == "" || h.Get("Traceparent") == "" {
			t.Errorf("injected headers: got %v, want b3 and traceparent", h)
		}
	})
	get(t, url, map[string]string{"B3": clientTrace + "-" + clientSpan + "-1"})
	spans := rcv.WaitFor(t, "server span", func(s []tracingtest.Span) bool { return len(s) >= 1 })
	if s := spans[0]; s.TraceID != clientTrace || s.Parent != clientSpan {
		t.Errorf("server span: got trace %s parent %s, want %s %s", s.TraceID, s.Parent, clientTrace, clientSpan)
	}
}

// TestUnsampledNotExported: under a ratio of 0 no span is exported,
// yet the request has a valid span context to pass on.
func TestUnsampledNotExported(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewGRPC(t)
	tr := newTracer(t, tracing.ProtocolGRPC, rcv.URL, func(c *tracing.Config) { c.Sampler, c.SamplerArg = "traceidratio", 0 })
	url := serve(t, tr, func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); !sc.IsValid() || sc.IsSampled() {
			t.Errorf("span context: got valid %v sampled %v, want valid and not sampled", sc.IsValid(), sc.IsSampled())
		}
	})
	for range 10 {
		get(t, url, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rcv.Spans()); n != 0 {
		t.Errorf("spans exported: got %d, want 0", n)
	}
}

// TestHungReceiverDropsAndCounts: with a receiver that never answers,
// requests go on as ever, and the spans that do not fit the bounded queue
// are dropped and counted in gateway_trace_spans_dropped_total.
func TestHungReceiverDropsAndCounts(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewBlockingGRPC(t)
	tr := newTracer(t, tracing.ProtocolGRPC, rcv.URL, func(c *tracing.Config) {
		c.MaxQueue, c.BatchSize, c.ExportTimeout = 4, 2, time.Hour
	})
	t.Cleanup(rcv.Unblock) // before the tracer's shutdown
	reg := prometheus.NewRegistry()
	tr.Register(reg)
	url := serve(t, tr, func(http.ResponseWriter, *http.Request) {})
	const n = 50
	for range n {
		get(t, url, nil)
	}
	// At most a batch being exported, the queue, and one span the
	// exporting goroutine holds between the two are not dropped.
	if got, most := tr.Dropped(), int64(n-4-2-1); got < most {
		t.Errorf("dropped: got %d, want at least %d", got, most)
	}
	if got, want := metricValue(t, reg, "gateway_trace_spans_dropped_total"), float64(tr.Dropped()); got != want {
		t.Errorf("gateway_trace_spans_dropped_total: got %v, want %v", got, want)
	}
}

// TestReceiverDown: a receiver that refuses connections fails no request.
func TestReceiverDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	for _, proto := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		tr := newTracer(t, proto, "http://"+addr+"/v1/traces", func(c *tracing.Config) { c.ExportTimeout = time.Second })
		url := serve(t, tr, func(http.ResponseWriter, *http.Request) {})
		for range 20 {
			get(t, url, nil)
		}
	}
}

func propagationHeader(h http.Header) propagation.HeaderCarrier { return propagation.HeaderCarrier(h) }

// metricValue returns the value of reg's counter or gauge named name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
