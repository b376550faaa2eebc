package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// grpcGateway starts a real gRPC server (the standard health service)
// as the upstream and the gateway in front of it, both speaking HTTP/2
// without TLS (h2c), and returns a client connection to the gateway and
// the number of calls the upstream served.
func grpcGateway(t *testing.T, rules string) (*grpc.ClientConn, *atomic.Int64) {
	t.Helper()
	served := &atomic.Int64{}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		served.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The upstream speaks HTTP/2 with prior knowledge: an h2c URL.
	rp, err := NewUpstream(UpstreamConfig{URL: &url.URL{Scheme: "h2c", Host: ln.Addr().String()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(HandlerConfig{Rules: rs, Store: store, Upstream: rp, Now: gwtest.NewClock(t0).Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = &http.Protocols{}
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient("passthrough:///"+srv.Listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, served
}

const grpcRules = `configs:
  - appId: app-g
    limits:
      - {api: /grpc.health.v1.Health/Check, limit: 2, unit: 60, algorithm: fixed_window}
      - {api: /grpc.health.v1.Health/List, limit: 0}
`

// TestGRPCRefusedAsResourceExhausted checks that a gRPC client library
// sees the gateway's rate limit as RESOURCE_EXHAUSTED with the retry
// delay, and its other refusals by their gRPC codes, while admitted calls
// reach a real gRPC upstream.
func TestGRPCRefusedAsResourceExhausted(t *testing.T) {
	t.Parallel()
	conn, served := grpcGateway(t, grpcRules)
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app := metadata.AppendToOutgoingContext(ctx, "x-app-id", "app-g")

	for i := range 2 {
		resp, err := client.Check(app, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("call %d: status %v", i, resp.Status)
		}
	}
	// A fixed window of a minute, at the test's fixed clock.
	wait := 60 - t0.Unix()%60
	// A Trailers-Only response's headers reach the application as
	// trailers.
	var hdr metadata.MD
	_, err := client.Check(app, &healthpb.HealthCheckRequest{}, grpc.Trailer(&hdr))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: got %v (%v), want ResourceExhausted", st.Code(), err)
	}
	if got, want := st.Message(), fmt.Sprintf("rate limited: app app-g /grpc.health.v1.Health/Check allows 2 per 1m0s; retry after %ds", wait); got != want {
		t.Errorf("message: got %q", got)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() != time.Duration(wait)*time.Second {
		t.Errorf("RetryInfo: got %v, want a delay of %ds", retry, wait)
	}
	if got := hdr.Get("retry-after"); len(got) != 1 || got[0] != strconv.FormatInt(wait, 10) {
		t.Errorf("retry-after: got %v, want [%d]", got, wait)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("upstream served %d calls, want 2", n)
	}

	tests := []struct {
		name string
		ctx  context.Context
		list bool
		want codes.Code
	}{
		{"invalid app ID", metadata.AppendToOutgoingContext(ctx, "x-app-id", "bad id"), false, codes.InvalidArgument},
		{"blocked method", app, true, codes.ResourceExhausted},
	}
	for _, tc := range tests {
		var err error
		if tc.list {
			_, err = client.List(tc.ctx, &healthpb.HealthListRequest{})
		} else {
			_, err = client.Check(tc.ctx, &healthpb.HealthCheckRequest{})
		}
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: got %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if n := served.Load(); n != 2 {
		t.Errorf("upstream served %d calls after the refusals, want 2", n)
	}
}

func TestGRPCContentTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ct   string
		want bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc; charset=utf-8", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/json", false},
		{"", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("POST", "/x", nil)
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if got := isGRPC(r); got != tc.want {
			t.Errorf("isGRPC(%q): got %v, want %v", tc.ct, got, tc.want)
		}
	}
}

// TestGRPCRefusalOverHTTP1 checks the refusal's headers as any client
// sees them, and that a request that is not gRPC still gets its 429.
func TestGRPCRefusalOverHTTP1(t *testing.T) {
	t.Parallel()
	g := newGW(t, "configs:\n  - appId: a\n    limits:\n      - {api: /s/M, limit: 0}\n      - {api: /s/N, limit: 1, unit: 60, algorithm: fixed_window}\n")
	w := g.do("POST", "/s/M", "a", "Content-Type", "application/grpc")
	if w.Code != 200 || w.Header().Get("Grpc-Status") != "8" || w.Header().Get("Content-Type") != "application/grpc" || w.Body.Len() != 0 {
		t.Errorf("blocked gRPC call: got %d %v body %q", w.Code, w.Header(), w.Body.String())
	}
	if got := w.Header().Get("Grpc-Retry-Pushback-Ms"); got != "-1" {
		t.Errorf("blocked pushback: got %q, want -1", got)
	}
	g.do("POST", "/s/N", "a")
	w = g.do("POST", "/s/N", "a")
	if w.Code != 429 {
		t.Errorf("plain request: got %d, want 429", w.Code)
	}
	w = g.do("POST", "/s/N", "a", "Content-Type", "application/grpc")
	if w.Code != 200 || w.Header().Get("Grpc-Status") != "8" || w.Header().Get("Grpc-Retry-Pushback-Ms") != w.Header().Get("Retry-After")+"000" {
		t.Errorf("limited gRPC call: got %d %v", w.Code, w.Header())
	}
	if got := g.obs.last().Status; got != 429 {
		t.Errorf("observed status: got %d, want 429 (what the gateway decided)", got)
	}
}

// TestGRPCRefusalProviderFormat: a rule whose refusals are written in an
// LLM provider's shape still gives a gRPC client the refusal's message,
// and a blocked method's pushback of -1.
func TestGRPCRefusalProviderFormat(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"openai", "anthropic"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			conn, _ := grpcGateway(t, `configs:
  - appId: app-g
    limits:
      - {api: /grpc.health.v1.Health/Check, limit: 1, unit: 60, algorithm: fixed_window, errorFormat: `+format+`}
      - {api: /grpc.health.v1.Health/List, limit: 0, errorFormat: `+format+`}
`)
			client := healthpb.NewHealthClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			app := metadata.AppendToOutgoingContext(ctx, "x-app-id", "app-g")
			if _, err := client.Check(app, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			wait := 60 - t0.Unix()%60
			_, err := client.Check(app, &healthpb.HealthCheckRequest{})
			st := status.Convert(err)
			want := fmt.Sprintf("Rate limit reached for app app-g on /grpc.health.v1.Health/Check (1 per 1m0s). Please try again in %ds.", wait)
			if st.Code() != codes.ResourceExhausted || st.Message() != want {
				t.Errorf("limited: got %v %q, want ResourceExhausted %q", st.Code(), st.Message(), want)
			}
			var hdr metadata.MD
			_, err = client.List(app, &healthpb.HealthListRequest{}, grpc.Trailer(&hdr))
			st = status.Convert(err)
			if st.Code() != codes.ResourceExhausted || st.Message() == "" || st.Message() == "Too Many Requests" {
				t.Errorf("blocked: got %v %q, want ResourceExhausted with the refusal's message", st.Code(), st.Message())
			}
			if got := hdr.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "-1" {
				t.Errorf("blocked: grpc-retry-pushback-ms %v, want [-1]", got)
			}
		})
	}
}
