package rls

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/tracing/tracingtest"
)

// TestTraces serves `gateway rls` as NewServer builds it, tracing to a
// real OTLP receiver, and checks the spans of a ShouldRateLimit call
// that carries Envoy's trace context: the call's server span continues
// it and carries the domain, the descriptors (values hashed) and the
// decision, with an event per descriptor; the decision span is its child.
func TestTraces(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewHTTP(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(extConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "key")
	srv, err := NewServer(ServerConfig{
		ConfigPath: path, MaxConfigBytes: 1 << 20, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		Headers: ratelimitheader.Both, Store: stores.DefaultConfig(), ShutdownTimeout: 10 * time.Second,
		Logger:            slog.New(slog.DiscardHandler),
		KeyHashSecretFile: secretFile,
		Tracing:           tracing.Config{Enabled: true, Protocol: tracing.ProtocolHTTP, Endpoint: rcv.URL, Sampler: "parentbased_always_on", BatchDelay: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)

	const trace, parent = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		id := trace[:31] + string(rune('a'+i))
		md := metadata.Pairs("traceparent", "00-"+id+"-"+parent+"-01")
		resp, err := client.ShouldRateLimit(metadata.NewOutgoingContext(context.Background(), md),
			&rlsv3.RateLimitRequest{Domain: "ext", Descriptors: descs("sliding=secret-user")})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != want {
			t.Fatalf("call %d: got %v, want %v", i, resp.OverallCode, want)
		}
	}
	over := trace[:31] + "c"
	spans := rcv.WaitFor(t, "server span of the refused call", func(all []tracingtest.Span) bool {
		for _, s := range tracingtest.Trace(all, over) {
			if s.Kind.String() == "SPAN_KIND_SERVER" {
				return true
			}
		}
		return false
	})
	var call, dec tracingtest.Span
	for _, s := range tracingtest.Trace(spans, over) {
		switch s.Name {
		case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
			call = s
		case tracing.SpanDecide:
			dec = s
		}
	}
	if call.Parent != parent || call.Kind.String() != "SPAN_KIND_SERVER" {
		t.Fatalf("call span: got %+v, want a server span whose parent is %s; spans:\n%s", call, parent, tracingtest.Dump(spans))
	}
	if dec.Parent != call.SpanID {
		t.Errorf("decision span: got parent %q, want the call's %s", dec.Parent, call.SpanID)
	}
	if got := dec.Attrs[tracing.AttrDecidedBy]; got != "store" {
		t.Errorf("decision %s: got %v, want store", tracing.AttrDecidedBy, got)
	}
	if got := call.Attrs[tracing.AttrDomain]; got != "ext" {
		t.Errorf("%s: got %v, want ext", tracing.AttrDomain, got)
	}
	if got := call.Attrs[tracing.AttrDecision]; got != "OVER_LIMIT" {
		t.Errorf("%s: got %v, want OVER_LIMIT", tracing.AttrDecision, got)
	}
	// Hashed under the secret the access log and /top use, not plainly:
	// a plain hash of a user ID is undone by hashing every likely one.
	secret, _, err := observe.LoadKeyHashSecret(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	wantDesc := "sliding=" + observe.NewKeyHasher(secret).Hash("secret-user")
	if wantDesc == "sliding="+observe.KeyHash("secret-user") {
		t.Fatal("the secret's hash equals the plain one")
	}
	if got, _ := call.Attrs[tracing.AttrDescriptors].([]any); len(got) != 1 || got[0] != wantDesc {
		t.Errorf("%s: got %v, want [%s]", tracing.AttrDescriptors, call.Attrs[tracing.AttrDescriptors], wantDesc)
	}
	if strings.Contains(tracingtest.Dump([]tracingtest.Span{call, dec}), "secret-user") {
		t.Errorf("a descriptor value is on the spans as it is: %s", tracingtest.Dump([]tracingtest.Span{call, dec}))
	}
	if len(call.Events) != 1 || call.Events[0].Name != tracing.EventLimit {
		t.Fatalf("call events: got %+v, want one %s", call.Events, tracing.EventLimit)
	}
	ev := call.Events[0].Attrs
	for k, want := range map[string]any{
		"ratelimit.code": "OVER_LIMIT", tracing.AttrPolicy: "sliding", tracing.AttrQuota: int64(2),
		tracing.AttrRemaining: int64(0), "ratelimit.unit": "minute",
	} {
		if ev[k] != want {
			t.Errorf("descriptor event %s: got %v, want %v", k, ev[k], want)
		}
	}
}
