package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/tracing/tracingtest"
)

// TestEndToEndTraces runs the binary with tracing configured by the
// standard OTEL_ environment only, exporting over gRPC to a real
// receiver: a request's server span continues the caller's trace under
// the service name the environment gives, and the upstream receives the
// trace context.
func TestEndToEndTraces(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewGRPC(t)
	var mu sync.Mutex
	var parents []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := startGateway(t, []string{
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL,
		"OTEL_SERVICE_NAME=edge", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=e2e", "OTEL_BSP_SCHEDULE_DELAY=20",
	}, "--upstream", up.URL, "--config", "configs/demo-rules.yaml")
	const trace, parent = "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	if code, body := send(t, "GET", g.proxy+"/v1/user/42", "X-App-Id", "app-1", "Traceparent", "00-"+trace+"-"+parent+"-01"); code != 200 {
		t.Fatalf("GET: %d %s", code, body)
	}
	spans := rcv.WaitFor(t, "the request's server span", func(all []tracingtest.Span) bool {
		for _, s := range tracingtest.Trace(all, trace) {
			if s.Parent == parent {
				return true
			}
		}
		return false
	})
	var srv tracingtest.Span
	for _, s := range tracingtest.Trace(spans, trace) {
		if s.Parent == parent {
			srv = s
		}
	}
	if srv.Kind.String() != "SPAN_KIND_SERVER" || srv.Attrs[tracing.AttrDecision] != "allowed" {
		t.Errorf("server span: got %+v, want a server span of an allowed request", srv)
	}
	if got := srv.Resource["service.name"]; got != "edge" {
		t.Errorf("service.name: got %v, want edge", got)
	}
	if got := srv.Resource["deployment.environment"]; got != "e2e" {
		t.Errorf("deployment.environment: got %v, want e2e", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(parents) != 1 || !strings.HasPrefix(parents[0], "00-"+trace+"-") || strings.Contains(parents[0], parent) {
		t.Errorf("upstream traceparent: got %q, want the trace %s with a span of the gateway's", parents, trace)
	}
}

// TestEndToEndRLSTraces runs `gateway rls` with envoyproxy/ratelimit's
// TRACING_ variables, exporting over OTLP/HTTP: each call is a span with
// its domain, under TRACING_SERVICE_NAME.
func TestEndToEndRLSTraces(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewHTTP(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(rlsE2EConfig, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startRLS(t, []string{
		"TRACING_ENABLED=true", "TRACING_EXPORTER_PROTOCOL=http", "TRACING_SERVICE_NAME=RateLimit",
		"TRACING_SAMPLING_RATE=1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=20",
	}, nil, "--config", path)
	g.ask(t, "e2e", "k=v")
	spans := rcv.WaitFor(t, "a ShouldRateLimit span", func(all []tracingtest.Span) bool {
		_, ok := tracingtest.Find(all, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
		return ok
	})
	s, _ := tracingtest.Find(spans, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if got := s.Resource["service.name"]; got != "RateLimit" {
		t.Errorf("service.name: got %v, want RateLimit", got)
	}
	if got := s.Attrs[tracing.AttrDomain]; got != "e2e" {
		t.Errorf("%s: got %v, want e2e", tracing.AttrDomain, got)
	}
}

// TestTracingEnvErrors: a tracing setting that cannot work stops the
// start with a usage error naming the variable.
func TestTracingEnvErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cmd, env, want string }{
		{"serve", "OTEL_TRACES_EXPORTER=zipkin", "OTEL_TRACES_EXPORTER"},
		{"serve", "OTEL_TRACES_SAMPLER=sometimes", "OTEL_TRACES_SAMPLER"},
		{"rls", "TRACING_SAMPLING_RATE=lots", "TRACING_SAMPLING_RATE"},
	} {
		args := []string{"serve", "--demo-upstream"}
		if tc.cmd == "rls" {
			args = []string{"rls", "--config", "examples/rls/config.yaml"}
		}
		code, _, errOut := runBinaryEnv(t, []string{tc.env}, append(args, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s with %s: exit %d %q, want 2 naming %s", tc.cmd, tc.env, code, errOut, tc.want)
		}
	}
}
