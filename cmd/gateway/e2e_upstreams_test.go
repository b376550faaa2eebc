package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestEndToEndUpstreamFailuresAndH2C runs the binary with --h2c and
// --ready-upstream: a plaintext gRPC client reaches a real gRPC server
// through an h2c target, and requests that fail on every target of a
// pool (500s, timeouts) leave each pool a target and /readyz ready.
func TestEndToEndUpstreamFailuresAndH2C(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/err"):
			w.WriteHeader(http.StatusInternalServerError)
		case strings.HasSuffix(r.URL.Path, "/slow"):
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	var urls []string
	for range 3 {
		s := httptest.NewServer(handler)
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	t.Cleanup(func() { close(release) })

	rules := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rules, []byte(fmt.Sprintf(`upstreams:
  - {name: grpc, targets: ["h2c://%s"]}
  - {name: two, targets: [%s, %s], outlier: {statuses: [5xx]}}
  - {name: one, targets: [%s]}
routes:
  - {path: /grpc.health.v1.Health, upstream: grpc}
  - {path: /two, upstream: two}
  - {path: /one, upstream: one}
  - {path: /one/slow, upstream: one, timeout: 200ms}
configs:
  - appId: "*"
    limit: -1
`, ln.Addr(), urls[0], urls[1], urls[2])), 0o644)
	g := startGateway(t, nil, "--config", rules, "--h2c", "--ready-upstream", "grpc,two,one")

	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.proxy, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.OK {
		t.Errorf("plaintext gRPC through an h2c target: got %v, want OK", err)
	}

	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 10 {
		get(g.proxy + "/two/err")
	}
	for range 5 {
		if code := get(g.proxy + "/one/slow"); code != http.StatusGatewayTimeout {
			t.Fatalf("slow request: got %d, want 504", code)
		}
	}
	for _, path := range []string{"/two/ok", "/one/ok"} {
		for i := range 10 {
			if code := get(g.proxy + path); code != 200 {
				t.Errorf("%s, request %d after the failures: got %d, want 200", path, i, code)
			}
		}
	}
	if code := get(g.admin + "/readyz"); code != 200 {
		t.Errorf("/readyz after the failures: got %d, want 200", code)
	}
}
