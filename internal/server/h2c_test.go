package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestH2C calls a real gRPC server through the gateway with a plaintext
// gRPC client: with H2C the proxy port serves it (and HTTP/1.1 still),
// to an h2c:// target; without, the client cannot speak to the port.
func TestH2C(t *testing.T) {
	t.Parallel()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	for _, tt := range []struct {
		name string
		h2c  bool
		want codes.Code
	}{
		{name: "h2c", h2c: true, want: codes.OK},
		{name: "http/1.1 only", want: codes.Unavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := startLive(t, func(c *Config) {
				c.H2C = tt.h2c
				os.WriteFile(c.ConfigPath, []byte(fmt.Sprintf(`
upstreams: [{name: grpc, targets: ["h2c://%s"]}]
routes: [{path: /grpc.health.v1.Health, upstream: grpc}]
configs:
  - appId: "*"
    limit: -1
`, ln.Addr())), 0o644)
			})
			conn, err := grpc.NewClient("passthrough:///"+g.proxy, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("call: got %v (%v), want %v", got, err, tt.want)
			}
			if tt.want == codes.OK && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("call: got %v, want SERVING", resp.GetStatus())
			}
			// HTTP/1.1 goes on as before, to --upstream.
			if code := g.get(t, "/x"); code != 200 {
				t.Errorf("an HTTP/1.1 request: got %d, want 200", code)
			}
		})
	}
}
