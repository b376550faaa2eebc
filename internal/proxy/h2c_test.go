package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// newGRPCServer starts a real gRPC server (the standard health service),
// which speaks HTTP/2 without TLS only, and returns its address and the
// calls it served.
func newGRPCServer(t *testing.T) (string, *atomic.Int64) {
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
	return ln.Addr().String(), served
}

// h2cClient serves g's handler on a listener of its own that speaks
// HTTP/2 without TLS too, as `gateway serve --h2c` does, and returns a
// plaintext gRPC client of it.
func h2cClient(t *testing.T, g *routed) healthpb.HealthClient {
	t.Helper()
	srv := httptest.NewUnstartedServer(g.h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient("passthrough:///"+srv.Listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestGRPCToH2CTargets sends plaintext gRPC calls through a route to a
// pool of real gRPC servers: h2c targets serve them; an http target
// (HTTP/1.1) or a dead one fails them, and a failed call is counted as
// any admitted request is (docs/routes.md, "gRPC and HTTP/2 without TLS").
func TestGRPCToH2CTargets(t *testing.T) {
	t.Parallel()
	a, aServed := newGRPCServer(t)
	b, bServed := newGRPCServer(t)
	c, cServed := newGRPCServer(t)
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: grpc, targets: [h2c://%s, h2c://%s]}]
routes: [{path: /grpc.health.v1.Health, upstream: grpc}]
configs:
  - appId: "*"
    limits: [{api: /grpc.health.v1.Health/Check, limit: 2, unit: 1h}]
`, a, b), "")
	client := h2cClient(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if got := status.Code(err); got != want {
			t.Fatalf("call %d: got %v (%v), want %v", i, got, err, want)
		}
	}
	if got := aServed.Load() + bServed.Load(); got != 2 {
		t.Errorf("the h2c targets served %d calls, want 2", got)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	// The same rule counts the calls of every route: a fresh gateway
	// for each.
	for _, tt := range []struct{ name, host string }{
		{"http target: HTTP/1.1 to a gRPC server", "http1.test"},
		{"dead h2c target", "dead.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newRouted(t, fmt.Sprintf(`
upstreams:
  - {name: http1, targets: [http://%s]}
  - {name: dead, targets: [h2c://%s]}
routes:
  - {host: http1.test, path: /, upstream: http1}
  - {host: dead.test, path: /, upstream: dead}
configs:
  - appId: "*"
    limits: [{api: /grpc.health.v1.Health/Check, limit: 2, unit: 1h}]
`, c, dead), "")
			client := h2cClient(t, g)
			for i, want := range []codes.Code{codes.Unavailable, codes.Unavailable, codes.ResourceExhausted} {
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.CallAuthority(tt.host))
				if got := status.Code(err); got != want {
					t.Fatalf("call %d: got %v (%v), want %v: the failed calls are counted", i, got, err, want)
				}
			}
		})
	}
	if got := cServed.Load(); got != 0 {
		t.Errorf("the gRPC server behind an http target served %d calls, want 0", got)
	}
}
