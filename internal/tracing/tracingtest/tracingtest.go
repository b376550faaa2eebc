// Package tracingtest runs real OTLP trace receivers on loopback for
// tests: the collector's gRPC TraceService, and the OTLP/HTTP endpoint
// decoding the protobuf body, both keeping the spans they receive. It
// must not be imported by non-test code.
package tracingtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Wait is how long WaitFor waits: a generous test value.
const Wait = 60 * time.Second

// Span is a received span, flattened for tests.
type Span struct {
	Name                    string
	TraceID, SpanID, Parent string // hex; Parent "" for a root
	Kind                    tracepb.Span_SpanKind
	Attrs                   map[string]any
	Events                  []Event
	// StatusError reports whether the span's status is Error.
	StatusError bool
	// Resource are the attributes of the span's resource.
	Resource map[string]any
}

// Event is a span's event.
type Event struct {
	Name  string
	Attrs map[string]any
}

// Receiver keeps the spans exported to it. It is safe for concurrent
// use.
type Receiver struct {
	// URL is the endpoint to give the exporter: for gRPC
	// http://127.0.0.1:PORT, for HTTP http://127.0.0.1:PORT/v1/traces.
	URL string

	mu      sync.Mutex
	spans   []Span
	exports int
	changed chan struct{} // closed and replaced at every export
	block   chan struct{} // when not nil, exports wait until it closes
}

func newReceiver(block bool) *Receiver {
	r := &Receiver{changed: make(chan struct{})}
	if block {
		r.block = make(chan struct{})
	}
	return r
}

// NewGRPC starts a gRPC OTLP receiver that stops when the test ends.
func NewGRPC(t testing.TB) *Receiver { return startGRPC(t, false) }

// NewBlockingGRPC starts a gRPC OTLP receiver that never answers an
// export until the test ends: a receiver that has hung.
func NewBlockingGRPC(t testing.TB) *Receiver { return startGRPC(t, true) }

func startGRPC(t testing.TB, block bool) *Receiver {
	t.Helper()
	r := newReceiver(block)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, &grpcService{r: r})
	go srv.Serve(l)
	t.Cleanup(func() {
		r.Unblock()
		srv.Stop()
	})
	r.URL = "http://" + l.Addr().String()
	return r
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s *grpcService) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	if err := s.r.wait(ctx); err != nil {
		return nil, err
	}
	s.r.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// NewHTTP starts an OTLP/HTTP receiver (protobuf bodies at /v1/traces)
// that stops when the test ends.
func NewHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := newReceiver(false)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "POST /v1/traces only", http.StatusNotFound)
			return
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "protobuf only, not "+ct, http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var er collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &er); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&er)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/v1/traces"
	return r
}

func (r *Receiver) wait(ctx context.Context) error {
	if r.block == nil {
		return nil
	}
	select {
	case <-r.block:
		return fmt.Errorf("receiver stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unblock makes a blocking receiver fail every export, those waiting
// included, at once.
func (r *Receiver) Unblock() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.block != nil {
		select {
		case <-r.block:
		default:
			close(r.block)
		}
	}
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: attrs(s.GetAttributes()), Resource: res,
					StatusError: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.Parent = hex.EncodeToString(p)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Attrs: attrs(e.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	r.exports++
	close(r.changed)
	r.changed = make(chan struct{})
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor waits until ok holds for the spans received, and returns them;
// it fails the test after Wait.
func (r *Receiver) WaitFor(t testing.TB, what string, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.NewTimer(Wait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %s among the %d spans received in %s:\n%s", what, len(spans), Wait, Dump(spans))
			return nil
		}
	}
}

// Trace returns the spans of trace id.
func Trace(spans []Span, id string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Find returns the first span of spans named name, if any.
func Find(spans []Span, name string) (Span, bool) {
	for _, s := range spans {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}

// Dump writes spans one a line, for failure messages.
func Dump(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s trace=%s span=%s parent=%s attrs=%v events=%v\n", s.Kind, s.Name, s.TraceID, s.SpanID, s.Parent, s.Attrs, s.Events)
	}
	return b.String()
}
