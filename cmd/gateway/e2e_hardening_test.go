package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// TestEndToEndAdminToken checks that POST /rules/reload takes its token
// from GATEWAY_ADMIN_TOKEN or --admin-token-file, and is disabled without
// one; and that with one, GET /rules, /top and /usage need it too.
func TestEndToEndAdminToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		env   []string
		args  []string
		token string // the gateway's token; "" for none
	}{
		{name: "environment", env: []string{"GATEWAY_ADMIN_TOKEN=from-the-env"}, token: "from-the-env"},
		{name: "file", args: []string{"--admin-token-file", tokenFile}, token: "from-a-file"},
		{name: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startGateway(t, tt.env, append([]string{"--demo-upstream"}, tt.args...)...)
			if tt.token == "" {
				if code, body := send(t, "POST", g.admin+"/rules/reload", "Authorization", "Bearer anything"); code != 403 || !strings.Contains(body, `"error":"admin_disabled"`) || !strings.Contains(body, "--admin-token") {
					t.Errorf("reload without a token configured: got %d %s, want 403 admin_disabled naming --admin-token", code, body)
				}
				return
			}
			if code, body := send(t, "POST", g.admin+"/rules/reload"); code != 401 || !strings.Contains(body, `"error":"unauthorized"`) {
				t.Errorf("reload without credentials: got %d %s, want 401 unauthorized", code, body)
			}
			if code, body := send(t, "POST", g.admin+"/rules/reload", "Authorization", "Bearer not-"+tt.token); code != 401 || !strings.Contains(body, `"error":"unauthorized"`) {
				t.Errorf("reload with a wrong token: got %d %s, want 401 unauthorized", code, body)
			}
			if code, body := send(t, "POST", g.admin+"/rules/reload", "Authorization", "Bearer "+tt.token); code != 200 || !strings.Contains(body, `"status":"unchanged"`) {
				t.Errorf("reload with the token: got %d %s, want 200 unchanged", code, body)
			}
			// With a token, the reads that show rules and callers need it;
			// the probes and the metrics do not.
			for _, path := range []string{"/rules", "/top", "/usage?app=%2A"} {
				if code, _ := send(t, "GET", g.admin+path); code != 401 {
					t.Errorf("GET %s without credentials: got %d, want 401", path, code)
				}
				if code, _ := send(t, "GET", g.admin+path, "Authorization", "Bearer "+tt.token); code != 200 {
					t.Errorf("GET %s with the token: got %d, want 200", path, code)
				}
			}
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				if code, _ := send(t, "GET", g.admin+path); code != 200 {
					t.Errorf("GET %s without credentials: got %d, want 200", path, code)
				}
			}
			// gateway top sends GATEWAY_ADMIN_TOKEN.
			if code, _, errOut := runBinaryEnv(t, []string{"GATEWAY_ADMIN_TOKEN=" + tt.token}, "top", "--admin", g.admin); code != 0 {
				t.Errorf("gateway top with the token: exit %d: %s", code, errOut)
			}
			if code, _, _ := runBinaryEnv(t, []string{"GATEWAY_ADMIN_TOKEN="}, "top", "--admin", g.admin); code == 0 {
				t.Error("gateway top without the token: exit 0, want a failure")
			}
		})
	}
}

// TestEndToEndTLS serves HTTPS over HTTP/2 with --tls-cert and --tls-key,
// while the admin port stays plain HTTP.
func TestEndToEndTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	cert := tlstest.New(t, 1)
	for file, data := range map[string][]byte{certFile: cert.CertPEM, keyFile: cert.KeyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, nil, "--demo-upstream", "--tls-cert", certFile, "--tls-key", keyFile)

	roots := x509.NewCertPool()
	roots.AddCert(cert.Cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", strings.Replace(g.proxy, "http://", "https://", 1)+"/v1/user/42", nil)
	req.Header.Set("X-App-Id", "app-1")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("HTTPS request: %v\n%s", err, g.logs)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.Contains(string(body), `"upstream":"demo"`) {
		t.Errorf("HTTPS request: got %d over %s: %s, want 200 from the demo upstream over HTTP/2", resp.StatusCode, resp.Proto, body)
	}
	if code, _ := send(t, "GET", g.admin+"/healthz"); code != 200 {
		t.Errorf("admin /healthz over plain HTTP: got %d, want 200", code)
	}
}

// TestServeRejectsBadHardeningFlags checks the errors of the server limit,
// TLS and admin token flags, from the command line and the environment.
func TestServeRejectsBadHardeningFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantExit int
		want     string
	}{
		{name: "zero read header timeout", args: []string{"--read-header-timeout", "0"}, wantExit: 2, want: "--read-header-timeout 0s is not positive"},
		{name: "negative idle timeout", args: []string{"--idle-timeout", "-1s"}, wantExit: 2, want: "--idle-timeout -1s is not positive"},
		{name: "zero max header bytes from the environment", env: []string{"GATEWAY_MAX_HEADER_BYTES=0"}, wantExit: 2, want: "--max-header-bytes 0 is not positive"},
		{name: "cert without key", args: []string{"--tls-cert", filepath.Join(dir, "tls.crt")}, wantExit: 2, want: "--tls-cert and --tls-key go together"},
		{name: "missing cert files", args: []string{"--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key")}, wantExit: 1, want: "loading --tls-cert " + filepath.Join(dir, "tls.crt")},
		{name: "token and token file", args: []string{"--admin-token", "a", "--admin-token-file", filepath.Join(dir, "token")}, wantExit: 2, want: "--admin-token and --admin-token-file are exclusive"},
		{name: "negative watch settle", args: []string{"--watch-settle", "-1s"}, wantExit: 2, want: "--watch-settle -1s is negative"},
		{name: "redis store without a server", args: []string{"--store", "redis"}, wantExit: 2, want: "--store redis needs a server: set --redis-url"},
		{name: "redis cluster and sentinel", args: []string{"--store", "redis", "--redis-addrs", "127.0.0.1:1", "--redis-cluster", "--redis-sentinel-master", "m"}, wantExit: 2, want: "--redis-cluster and --redis-sentinel-master are exclusive"},
		{name: "negative drain delay", args: []string{"--drain-delay", "-1s"}, wantExit: 2, want: "--drain-delay -1s is negative"},
		{name: "unknown store", args: []string{"--store", "redi"}, wantExit: 2, want: `"redi" is not one of memory, redis`},
		{name: "unknown fail mode from the environment", env: []string{"GATEWAY_FAIL_MODE=ajar"}, wantExit: 2, want: `"ajar" is not one of open, closed, local`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A timeout, in case the gateway started serving after all.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"serve", "--demo-upstream", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, tt.args...)
			cmd := gatewayCmd(t, ctx, args...)
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantExit || !strings.Contains(string(out), tt.want) {
				t.Errorf("got exit %d %s, want exit %d and %q", code, out, tt.wantExit, tt.want)
			}
		})
	}
}
