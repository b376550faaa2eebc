package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// TestEndToEndRulesPushZooKeeperTLS runs the binary serving from a znode
// of a ZooKeeper that accepts only mutual TLS, with the TLS files from
// the environment, and pushes to it through the binary with the flags:
// the push reaches the gateway; a wrong CA is refused with the
// handshake's reason, and a certificate without its key by name.
func TestEndToEndRulesPushZooKeeperTLS(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	client := tlstest.New(t, 4002)
	zk := zktest.StartTLS(t, zktest.TLS{Cert: tlstest.New(t, 4001), ClientCA: &client})
	src := zk.TLSURL("/gateway/rules")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cert, key := write("client.pem", client.CertPEM), write("client-key.pem", client.KeyPEM)
	rules := func(name, limit string) string {
		return write(name, []byte("configs:\n- appId: app-1\n  limits:\n  - {api: /v1, limit: "+limit+", unit: 1h}\n"))
	}
	tlsFlags := []string{"--zk-ca", zk.CAFile, "--zk-cert", cert, "--zk-key", key}

	code, out, errOut := runBinary(t, append(append([]string{"rules", "push"}, tlsFlags...), src, rules("one.yaml", "1"))...)
	if code != 0 || !strings.Contains(out, ": version 0 (was none)") {
		t.Fatalf("first push: exit %d, %q %q", code, out, errOut)
	}
	env := []string{"GATEWAY_ZK_CA=" + zk.CAFile, "GATEWAY_ZK_CERT=" + cert, "GATEWAY_ZK_KEY=" + key}
	g := startGateway(t, env, "--upstream", up.URL, "--config", src)
	if n, _ := countAdmitted(t, 2, g.proxy+"/v1", "X-App-Id", "app-1"); n != 1 {
		t.Errorf("on version 0: admitted %d of 2, want 1", n)
	}
	code, out, errOut = runBinary(t, append(append([]string{"rules", "push", "--expect-version", "0"}, tlsFlags...), src, rules("three.yaml", "3"))...)
	if code != 0 || !strings.Contains(out, ": version 1 (was 0)") {
		t.Fatalf("push with --expect-version 0: exit %d, %q %q", code, out, errOut)
	}
	eventually.True(t, 30*time.Second, func() bool {
		_, body := send(t, "GET", g.admin+"/rules")
		return strings.Contains(body, `"version":"1"`)
	}, "the gateway did not take version 1\n%s", g.logs)
	if n, _ := countAdmitted(t, 3, g.proxy+"/v1", "X-App-Id", "app-1"); n != 2 {
		t.Errorf("on version 1: admitted %d of 3, want 2 (limit 3, 1 spent)", n)
	}

	otherCA := write("other-ca.pem", tlstest.New(t, 4003).CertPEM)
	code, _, errOut = runBinary(t, "rules", "get", "--timeout", "2s", "--zk-ca", otherCA, "--zk-cert", cert, "--zk-key", key, src)
	if want := "zk: TLS handshake with " + zk.TLSAddr + ": tls: failed to verify certificate: x509: certificate signed by unknown authority"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("get with the wrong CA: exit %d, %q; want 1 and %q", code, errOut, want)
	}
	code, _, errOut = runBinary(t, "rules", "get", "--zk-ca", zk.CAFile, "--zk-cert", cert, src)
	if want := "--zk-cert without --zk-key"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("get with a certificate without its key: exit %d, %q; want 1 and %q", code, errOut, want)
	}
}
