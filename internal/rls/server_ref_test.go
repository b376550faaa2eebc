package rls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	"github.com/ratelimit-gateway/gateway/internal/xdstest"
)

// TestServerXDS runs a Server on an xDS server's config with client
// certificates required on gRPC: /healthcheck fails until a config is in
// force (HealthyWithConfig), then POST /json and /rlconfig answer from
// it; a gRPC client without a certificate is refused, one with it is
// answered.
func TestServerXDS(t *testing.T) {
	t.Parallel()
	cert := tlstest.New(t, 7)
	dir := t.TempDir()
	for name, body := range map[string][]byte{"tls.crt": cert.CertPEM, "tls.key": cert.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	xds := xdstest.Start(t, nil)
	srv, err := NewServer(ServerConfig{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", MaxConfigBytes: rlsconfig.DefaultMaxBytes,
		Store: stores.DefaultConfig(), ShutdownTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
		XDS:               XDSConfig{ServerURL: xds.Addr, NodeID: "n", BackoffInitial: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
		HealthyWithConfig: true,
		TLSCert:           filepath.Join(dir, "tls.crt"), TLSKey: filepath.Join(dir, "tls.key"),
		TLSClientCA: filepath.Join(dir, "tls.crt"), TLSClientSAN: "localhost",
		ReferenceCounting: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	admin := "http://" + srv.AdminAddr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthcheck"); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck before a config: got %d, want 500", code)
	}

	xds.Push(t, "n", "1", &rlsconfv3.RateLimitConfig{Name: "d", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 1},
	}}})
	xds.WaitRequest(t, 30*time.Second, "ACK of version 1", xdstest.Acked("1"))
	if code, body := get("/healthcheck"); code != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck: got %d %q, want 200 OK", code, body)
	}
	if _, body := get("/rlconfig"); body != "d.k: unit=DAY requests_per_unit=1, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig: got %q", body)
	}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, err := http.Post(admin+"/json", "application/json", strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !strings.Contains(string(b), `"overallCode"`) {
			t.Errorf("POST /json %d: got %d %s, want %d with the response", i, resp.StatusCode, b, want)
		}
	}
	if resp, _ := http.Post(admin+"/json", "application/json", strings.NewReader(`{"domain":`)); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /json of bad JSON: got %d, want 400", resp.StatusCode)
	}

	pool := x509.NewCertPool()
	pool.AddCert(cert.Cert)
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	call := func(certs []tls.Certificate) error {
		t.Helper()
		conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("k=w")})
		return err
	}
	if err := call(nil); err == nil {
		t.Error("a gRPC client without a certificate: got an answer, want it refused")
	}
	if err := call([]tls.Certificate{pair}); err != nil {
		t.Errorf("a gRPC client with its certificate: %v", err)
	}
}
