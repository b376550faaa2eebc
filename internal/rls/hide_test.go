package rls

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/stores"
)

// TestServerHidesValues runs a Server with an access log and reads its
// /top: by default both show a descriptor value only as its HMAC-SHA256
// under the --key-hash-secret-file secret, as `gateway serve` shows the
// values of keyed limits, never as it is nor as its plain (unkeyed)
// sha256; with --access-log-keys and --top-keys both show it as it is.
func TestServerHidesValues(t *testing.T) {
	t.Parallel()
	const value = "user-42@example.com"
	for _, raw := range []bool{false, true} {
		dir := t.TempDir()
		cfgFile, logFile, secretFile := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "access.log"), filepath.Join(dir, "secret")
		if err := os.WriteFile(cfgFile, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(ServerConfig{
			ConfigPath: cfgFile, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", MaxConfigBytes: rlsconfig.DefaultMaxBytes,
			Store: stores.DefaultConfig(), ShutdownTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
			AccessLog: logFile, KeyHashSecretFile: secretFile, AccessLogKeys: raw, TopKeys: raw,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()

		conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		for range 3 {
			if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("k=" + value)}); err != nil {
				t.Fatal(err)
			}
		}
		ccancel()
		conn.Close()

		secret, created, err := observe.LoadKeyHashSecret(secretFile)
		if err != nil || created {
			t.Fatalf("raw %v: the secret file: created %v, %v; want the server to have created it", raw, created, err)
		}
		shown := observe.NewKeyHasher(secret).Hash(value)
		if raw {
			shown = value
		} else if shown == observe.KeyHash(value) {
			t.Fatalf("the keyed hash equals the plain one")
		}

		resp, err := http.Get("http://" + srv.AdminAddr().String() + "/top?domain=d")
		if err != nil {
			t.Fatal(err)
		}
		var top topView
		err = json.NewDecoder(resp.Body).Decode(&top)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Limits) != 1 || len(top.Limits[0].Keys) != 1 {
			t.Fatalf("raw %v: /top: got %+v, want one descriptor with one key", raw, top.Limits)
		}
		if got, want := top.Limits[0].Keys[0].Key, "k="+shown; got != want {
			t.Errorf("raw %v: /top key: got %q, want %q", raw, got, want)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		data, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 3 {
			t.Fatalf("raw %v: access log: got %d lines, want 3:\n%s", raw, len(lines), data)
		}
		var l struct {
			Descriptors []struct{ Entries [][2]string }
		}
		if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Descriptors) != 1 || len(l.Descriptors[0].Entries) != 1 || l.Descriptors[0].Entries[0] != [2]string{"k", shown} {
			t.Errorf("raw %v: access log descriptors: got %+v, want k = %q", raw, l.Descriptors, shown)
		}
		if !raw && strings.Contains(string(data), value) {
			t.Errorf("the access log carries the value as it is:\n%s", data)
		}
	}
}
