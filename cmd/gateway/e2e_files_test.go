package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

// fifoRules returns a rule file whose upstream's tls ca is ca.
func fifoRules(ca string) string {
	return `upstreams:
  - name: api
    targets: [https://127.0.0.1:9443]
    tls:
      ca: ` + ca + `
routes:
  - path: /internal
    upstream: api
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 3
        unit: 1h
`
}

// runBounded runs the gateway with args and returns its exit code and
// stderr; a gateway still running after a generous minute is killed and
// fails the test (a FIFO it opened would hang it forever).
func runBounded(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := gatewayCmd(t, ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gateway %s: still running after a minute\n%s", strings.Join(args, " "), stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stderr.String()
}

// TestEndToEndFIFOFiles checks that a FIFO named where the gateway
// expects a file (one nobody writes to, which blocks a plain open
// forever) is refused at once with an error naming it: by validate, at
// start for every file flag, and on a reload, which leaves the rules in
// force and /rules answering.
func TestEndToEndFIFOFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fifoYAML := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifoYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	caRules := filepath.Join(dir, "ca-rules.yaml")
	if err := os.WriteFile(caRules, []byte(fifoRules(fifo)), 0o644); err != nil {
		t.Fatal(err)
	}
	const notRegular = "is not a regular file (a FIFO)"

	t.Run("validate", func(t *testing.T) {
		for _, path := range []string{caRules, fifoYAML} {
			code, errOut := runBounded(t, "validate", path)
			if code != 1 || !strings.Contains(errOut, notRegular) {
				t.Errorf("validate %s: exit %d, stderr %q; want 1 and %q", path, code, errOut, notRegular)
			}
		}
	})

	t.Run("start", func(t *testing.T) {
		serve := []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}
		good := "configs/ratelimiter-rule.yaml"
		for _, tc := range []struct {
			name string
			args []string
		}{
			{"config", []string{"--config", fifoYAML}},
			{"tls ca in the rules", []string{"--config", caRules}},
			{"tls-cert", []string{"--config", good, "--tls-cert", fifo, "--tls-key", fifo}},
			{"jwt-jwks", []string{"--config", good, "--jwt-jwks", fifo}},
			{"jwt-hmac-secret-file", []string{"--config", good, "--jwt-hmac-secret-file", fifo}},
			{"admin-token-file", []string{"--config", good, "--admin-token-file", fifo}},
			{"key-hash-secret-file", []string{"--config", good, "--key-hash-secret-file", fifo}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, errOut := runBounded(t, append(serve, tc.args...)...)
				if code == 0 || !strings.Contains(errOut, dir) || !strings.Contains(errOut, notRegular) {
					t.Errorf("serve %s: exit %d, stderr %q; want a failure naming the FIFO", strings.Join(tc.args, " "), code, errOut)
				}
			})
		}
	})

	t.Run("reload", func(t *testing.T) {
		up := newUpstreamOK(t)
		path := filepath.Join(dir, "rules.yaml")
		good := "configs:\n  - appId: app-1\n    limits:\n      - api: /v1/user\n        limit: 3\n        unit: 1h\n"
		if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		g := startGateway(t, nil, "--upstream", up, "--config", path)
		client := &http.Client{Timeout: 30 * time.Second}
		rules := func() string {
			resp, err := client.Get(g.admin + "/rules")
			if err != nil {
				t.Fatalf("GET /rules: %v\n%s", err, g.logs)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return string(body)
		}
		if err := os.WriteFile(path, []byte(fifoRules(fifo)), 0o644); err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Signal(syscall.SIGHUP)
		eventually.True(t, 30*time.Second, func() bool {
			return strings.Contains(rules(), notRegular)
		}, "the reload naming a FIFO was never reported in /rules\n%s", g.logs)
		if n, _ := countAdmitted(t, 4, g.proxy+"/v1/user", "X-App-Id", "app-1"); n != 3 {
			t.Errorf("after the refused reload: admitted %d of 4, want the 3 of the rules in force", n)
		}
		// A later reload still works.
		if err := os.WriteFile(path, []byte(strings.Replace(good, "limit: 3", "limit: 10", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Signal(syscall.SIGHUP)
		eventually.True(t, 30*time.Second, func() bool {
			return !strings.Contains(rules(), `"lastError"`)
		}, "the good file after the FIFO never came into force\n%s", g.logs)
	})
}

// newUpstreamOK starts an upstream that answers 200 ok.
func newUpstreamOK(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	return up.URL
}
