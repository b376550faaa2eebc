package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// rlsRunning is a `gateway rls` process started by a test, with a gRPC
// client.
type rlsRunning struct {
	*running
	grpcAddr string
	client   rlsv3.RateLimitServiceClient
	conn     *grpc.ClientConn
}

// startRLS runs `gateway rls` with args and env, waits until it listens
// (its "gateway rls listening" log) and dials it, over TLS with roots.
func startRLS(t *testing.T, env []string, roots *x509.CertPool, args ...string) *rlsRunning {
	t.Helper()
	cmd := gatewayCmd(t, context.Background(), append([]string{"rls", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &rlsRunning{running: &running{cmd: cmd, done: make(chan error, 1), logs: &gwtest.Log{}}}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			g.logs.WriteString(line + "\n")
			var rec struct{ Msg, GRPC, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway rls listening" {
				g.grpcAddr, g.admin = rec.GRPC, "http://"+rec.Admin
				close(ready)
			}
		}
		g.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-g.done
	})
	select {
	case <-ready:
	case err := <-g.done:
		t.Fatalf("gateway rls exited before listening: %v\n%s", err, g.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway rls did not listen within 30s\n%s", g.logs)
	}
	creds := insecure.NewCredentials()
	if roots != nil {
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})
	}
	g.conn, err = grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.conn.Close() })
	g.client = rlsv3.NewRateLimitServiceClient(g.conn)
	return g
}

// ask calls ShouldRateLimit for one descriptor of entries "k=v,k=v".
func (g *rlsRunning) ask(t *testing.T, domain, entries string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &rlv3.RateLimitDescriptor{}
	for _, kv := range strings.Split(entries, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	resp, err := g.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v\n%s", err, g.logs)
	}
	return resp
}

// configMap lays dir out as a Kubernetes ConfigMap volume holding files:
// a timestamped directory, a "..data" symlink to it swapped by a rename,
// and a symlink per file into "..data".
type configMap struct {
	dir string
	gen int
}

func (c *configMap) update(t *testing.T, files map[string]string) {
	t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_11_26_%02d", c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

const rlsE2EConfig = `domain: e2e
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: %d}
`

// rulesSHA returns the sha256 and lastError of GET /rules.
func rulesSHA(t *testing.T, admin string) (sha, lastErr string) {
	t.Helper()
	_, body := send(t, "GET", admin+"/rules")
	var v struct{ SHA256, LastError string }
	json.Unmarshal([]byte(body), &v)
	return v.SHA256, v.LastError
}

// TestEndToEndRLS runs `gateway rls` over TLS on a ConfigMap-style
// directory: decisions, the health service, the admin port, bounded
// metrics, and reloads by symlink swap, a bad config refused.
func TestEndToEndRLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert := tlstest.New(t, 1)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	roots := x509.NewCertPool()
	roots.AddCert(cert.Cert)
	cm := &configMap{dir: filepath.Join(dir, "config")}
	os.Mkdir(cm.dir, 0o755)
	cm.update(t, map[string]string{"e2e.yaml": fmt.Sprintf(rlsE2EConfig, 2)})

	g := startRLS(t, nil, roots, "--config", cm.dir, "--tls-cert", certFile, "--tls-key", keyFile)

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := g.ask(t, "e2e", "k=secret-value").OverallCode; got != want {
			t.Errorf("call %d: got %v, want %v", i, got, want)
		}
	}
	if got := g.ask(t, "e2e", "k=other").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("another value: got %v, want OK (its own counter)", got)
	}
	if got := g.ask(t, "nosuch", "k=v").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown domain: got %v, want OK", got)
	}
	hc, err := healthpb.NewHealthClient(g.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: got %v, %v, want SERVING", hc, err)
	}
	if code, _ := send(t, "GET", g.admin+"/readyz"); code != 200 {
		t.Errorf("readyz: got %d, want 200", code)
	}
	_, metrics := send(t, "GET", g.admin+"/metrics")
	if !strings.Contains(metrics, `gateway_rls_descriptors_total{descriptor="k",domain="e2e",outcome="over_limit"} 1`) {
		t.Errorf("metrics lack the over_limit series of k:\n%s", grepLines(metrics, "gateway_rls"))
	}
	if strings.Contains(metrics, "secret-value") {
		t.Errorf("metrics carry a descriptor value")
	}

	// A ConfigMap update raises the limit: the count so far (2) stays.
	sha0, _ := rulesSHA(t, g.admin)
	cm.update(t, map[string]string{"e2e.yaml": fmt.Sprintf(rlsE2EConfig, 3)})
	eventually.True(t, 30*time.Second, func() bool {
		sha, _ := rulesSHA(t, g.admin)
		return sha != sha0
	}, "the ConfigMap swap was not reloaded\n%s", g.logs)
	resp := g.ask(t, "e2e", "k=secret-value")
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 3 {
		t.Errorf("after the reload: got %v, want OK with 0 remaining of 3", resp)
	}

	// A bad update is refused; the config in force stays.
	sha1, _ := rulesSHA(t, g.admin)
	cm.update(t, map[string]string{"e2e.yaml": "domain: e2e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"})
	eventually.True(t, 30*time.Second, func() bool {
		_, lastErr := rulesSHA(t, g.admin)
		return strings.Contains(lastErr, "e2e.yaml:4: invalid rate limit unit")
	}, "the bad config was not reported at /rules\n%s", g.logs)
	if sha, _ := rulesSHA(t, g.admin); sha != sha1 {
		t.Errorf("a bad config replaced the good one")
	}
	if got := g.ask(t, "e2e", "k=secret-value").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the bad update: got %v, want OVER_LIMIT by the limit of 3", got)
	}

	// SIGTERM drains and exits 0.
	g.cmd.Process.Signal(syscall.SIGTERM)
	if err := g.waitExit(t, "SIGTERM"); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, g.logs)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRLSValidate runs `gateway validate` on rls configs.
func TestRLSValidate(t *testing.T) {
	t.Parallel()
	if code, out, errOut := runBinary(t, "validate", "examples/rls/config.yaml"); code != 0 || !strings.Contains(out, "ok: rls config") {
		t.Errorf("validate the example: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, _ := runBinary(t, "validate", "internal/rlsconfig/testdata/envoyproxy/examples"); code != 0 || !strings.Contains(out, "2 domain(s)") {
		t.Errorf("validate envoyproxy/ratelimit's examples: exit %d, out %q", code, out)
	}
	code, _, errOut := runBinary(t, "validate", "internal/rlsconfig/testdata/envoyproxy/misspelled_key2.yaml")
	if code != 1 || !strings.Contains(errOut, `misspelled_key2.yaml:7: config error, unknown key "requestsperunit"`) {
		t.Errorf("validate a bad file: exit %d, err %q", code, errOut)
	}
	if code, _, errOut := runBinary(t, "validate", "--rls", "internal/rlsconfig/testdata/envoyproxy/empty_domain.yaml"); code != 1 || !strings.Contains(errOut, "empty_domain.yaml:1: config file cannot have an empty domain") {
		t.Errorf("validate --rls: exit %d, err %q", code, errOut)
	}
}

// TestEndToEndRLSFleet runs three `gateway rls` processes on one Redis:
// together they admit exactly the limit, then, with Redis stopped, each
// decides by its --fail-mode.
func TestEndToEndRLSFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(rlsE2EConfig, 50)), 0o644)
	// Leases off: with them (the default) a fleet never admits more than
	// the limit either, but tokens leased to one process and unspent are
	// room the others lack (docs/fleet.md, "Redis: one limit for a fleet of
	// gateways", Leases), so a burst may get fewer.
	env := []string{"GATEWAY_STORE=redis", "GATEWAY_REDIS_URL=" + srv.URL(), "GATEWAY_REDIS_TIMEOUT=5s", "GATEWAY_REDIS_LEASES=-1", "GATEWAY_LOCAL_SHARE=0.2"}
	modes := []string{"closed", "open", "local"}
	var fleet []*rlsRunning
	for _, m := range modes {
		fleet = append(fleet, startRLS(t, env, nil, "--config", cfg, "--fail-mode", m))
	}
	// 3 × 30 concurrent calls for one value: exactly 50 admitted.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, g := range fleet {
		for range 30 {
			wg.Go(func() {
				if g.ask(t, "e2e", "k=shared").OverallCode == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("fleet admitted %d of 90, want exactly 50", got)
	}

	srv.Stop()
	want := map[string]rlsv3.RateLimitResponse_Code{
		"closed": rlsv3.RateLimitResponse_OVER_LIMIT, "open": rlsv3.RateLimitResponse_OK, "local": rlsv3.RateLimitResponse_OK,
	}
	for i, g := range fleet {
		if got := g.ask(t, "e2e", "k=fresh").OverallCode; got != want[modes[i]] {
			t.Errorf("Redis stopped, --fail-mode %s: got %v, want %v\n%s", modes[i], got, want[modes[i]], g.logs)
		}
	}
	// closed is not ready without Redis; the others serve.
	eventually.True(t, 30*time.Second, func() bool {
		code, _ := send(t, "GET", fleet[0].admin+"/readyz")
		return code == 503
	}, "readyz of --fail-mode closed stays 200 with Redis stopped")
	if code, _ := send(t, "GET", fleet[1].admin+"/readyz"); code != 200 {
		t.Errorf("readyz of --fail-mode open with Redis stopped: got %d, want 200", code)
	}
	// local limits in memory with --local-share 0.2: 10 of 50.
	n := 0
	for range 30 {
		if fleet[2].ask(t, "e2e", "k=local").OverallCode == rlsv3.RateLimitResponse_OK {
			n++
		}
	}
	if n != 10 {
		t.Errorf("--fail-mode local admitted %d, want 10 (50 × --local-share 0.2)", n)
	}
}

// TestEndToEndRLSSighup reloads a single config file on SIGHUP, with
// --watch off; a bad file at start fails the start with its line.
func TestEndToEndRLSSighup(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "rls.yaml")
	os.WriteFile(cfg, []byte("domain: e2e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n"), 0o644)
	code, _, errOut := runBinary(t, "rls", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "rls.yaml:4: invalid rate limit unit") {
		t.Errorf("start with a bad config: exit %d, stderr %q; want 1 and the line at fault", code, errOut)
	}

	os.WriteFile(cfg, []byte(fmt.Sprintf(rlsE2EConfig, 1)), 0o644)
	g := startRLS(t, nil, nil, "--config", cfg, "--watch=false")
	if got := g.ask(t, "e2e", "k=a").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: got %v, want OK", got)
	}
	if got := g.ask(t, "e2e", "k=a").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call: got %v, want OVER_LIMIT", got)
	}
	sha0, _ := rulesSHA(t, g.admin)
	os.WriteFile(cfg, []byte(fmt.Sprintf(rlsE2EConfig, 5)), 0o644)
	g.cmd.Process.Signal(syscall.SIGHUP)
	eventually.True(t, 30*time.Second, func() bool {
		sha, _ := rulesSHA(t, g.admin)
		return sha != sha0
	}, "SIGHUP did not reload the config\n%s", g.logs)
	if got := g.ask(t, "e2e", "k=a").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("after the reload to 5: got %v, want OK", got)
	}
}

// TestEndToEndRLSTopAndAccessLog runs `gateway rls --access-log` and
// reads /top with `gateway top`: the heaviest values of the descriptor
// are listed (as they are, with --top-keys), at most --admin's K of them,
// and the log has one line per call with the values hashed.
func TestEndToEndRLSTopAndAccessLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile, logFile := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "access.log")
	os.WriteFile(cfgFile, fmt.Appendf(nil, rlsE2EConfig, 2), 0o600)
	g := startRLS(t, nil, nil, "--config", cfgFile, "--access-log", logFile, "--top-keys")

	calls := 0
	ask := func(entries string, want rlsv3.RateLimitResponse_Code) {
		t.Helper()
		calls++
		if got := g.ask(t, "e2e", entries).OverallCode; got != want {
			t.Errorf("%s: got %v, want %v", entries, got, want)
		}
	}
	for i := range 5 {
		ask("k=heavy-caller", map[bool]rlsv3.RateLimitResponse_Code{true: rlsv3.RateLimitResponse_OK, false: rlsv3.RateLimitResponse_OVER_LIMIT}[i < 2])
	}
	// More distinct values than /top keeps (32 a descriptor).
	for i := range 40 {
		ask(fmt.Sprintf("k=v%02d", i), rlsv3.RateLimitResponse_OK)
	}

	out, err := gatewayCmd(t, context.Background(), "top", "--admin", g.admin, "--app", "e2e").CombinedOutput()
	if err != nil {
		t.Fatalf("gateway top: %v\n%s", err, out)
	}
	rows := grepLines(string(out), " k ")
	if n := strings.Count(rows, "\n") + 1; n != 32 {
		t.Errorf("gateway top: got %d rows, want 32 (K)\n%s", n, out)
	}
	if first := strings.Fields(strings.SplitN(rows, "\n", 2)[0]); len(first) != 8 ||
		strings.Join([]string{first[0], first[1], first[2], first[3], first[4], first[6], first[7]}, " ") != "e2e k descriptor k=heavy-caller 5 2 3" {
		t.Errorf("gateway top: first row %q, want e2e k descriptor k=heavy-caller 5 ±0 2 3\n%s", first, out)
	}

	g.cmd.Process.Signal(syscall.SIGTERM)
	if err := g.waitExit(t, "SIGTERM"); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, g.logs)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "heavy-caller") {
		t.Errorf("the access log carries a descriptor value as it is")
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != calls {
		t.Fatalf("access log: got %d lines, want %d (one per call)", len(lines), calls)
	}
	var l struct {
		Time        time.Time
		Domain      string
		Code        string
		Peer        string
		Duration    *float64
		Descriptors []struct {
			Entries   [][2]string
			Code      string
			Limit     string
			Remaining *uint32
		}
	}
	if err := json.Unmarshal([]byte(lines[2]), &l); err != nil {
		t.Fatalf("line 3: %v: %s", err, lines[2])
	}
	if l.Time.IsZero() || l.Domain != "e2e" || l.Code != "OVER_LIMIT" || !strings.HasPrefix(l.Peer, "127.0.0.1:") || l.Duration == nil ||
		len(l.Descriptors) != 1 || len(l.Descriptors[0].Entries) != 1 || l.Descriptors[0].Entries[0][0] != "k" ||
		l.Descriptors[0].Code != "OVER_LIMIT" || l.Descriptors[0].Limit != "2/minute" || l.Descriptors[0].Remaining == nil {
		t.Errorf("line 3: got %s, want the third call of k=heavy-caller, denied", lines[2])
	}
}
