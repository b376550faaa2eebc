package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// TestEndToEndRulesPush runs the binary serving from etcd, and changes
// its rules with `gateway rules` through the binary: a push is taken, an
// invalid file is refused at its lines with exit 1, a stale
// --expect-version is refused naming the current version, get prints the
// value and its version, history lists it, rollback restores, and bad
// usage exits 2.
func TestEndToEndRulesPush(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	etcd := etcdtest.Start(t)
	src := etcd.URL("/gateway/rules")
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	rules := func(limit string) string {
		return "configs:\n- appId: app-1\n  limits:\n  - {api: /v1, limit: " + limit + ", unit: 1h}\n"
	}
	version := regexp.MustCompile(`: version (\d+)`)
	pushed := func(out string) string {
		t.Helper()
		m := version.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no version in %q", out)
		}
		return m[1]
	}

	code, out, errOut := runBinary(t, "rules", "push", src, file("one.yaml", rules("1")))
	if code != 0 || !strings.Contains(out, "(was none): 1 app section(s), 1 api rule(s)") {
		t.Fatalf("first push: exit %d, %q %q", code, out, errOut)
	}
	v1 := pushed(out)
	g := startGateway(t, nil, "--upstream", up.URL, "--config", src, "--rules-cache", filepath.Join(dir, "cache"))
	if n, _ := countAdmitted(t, 3, g.proxy+"/v1", "X-App-Id", "app-1"); n != 1 {
		t.Errorf("on version 1: admitted %d of 3, want 1", n)
	}

	code, out, errOut = runBinary(t, "rules", "push", "--expect-version", v1, src, file("three.yaml", rules("3")))
	if code != 0 || !strings.Contains(out, "(was "+v1+")") {
		t.Fatalf("push with --expect-version %s: exit %d, %q %q", v1, code, out, errOut)
	}
	v2 := pushed(out)
	eventually.True(t, 30*time.Second, func() bool {
		_, body := send(t, "GET", g.admin+"/rules")
		return strings.Contains(body, `"version":"`+v2+`"`)
	}, "the gateway did not take version %s\n%s", v2, g.logs)
	if n, _ := countAdmitted(t, 3, g.proxy+"/v1", "X-App-Id", "app-1"); n != 2 {
		t.Errorf("on version 2: admitted %d of 3, want 2 (limit 3, 1 spent)", n)
	}

	bad := file("bad.yaml", "configs:\n- appId: app-1\n  limits:\n  - {api: /v1, limit: -5}\n  - {api: /w, limit: 1, colour: red}\n")
	code, out, errOut = runBinary(t, "rules", "push", src, bad)
	if code != 1 || out != "" {
		t.Errorf("invalid push: exit %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{bad + ":4: limit -5 is below -1", bad + ":5: ", bad + ": 2 error(s); nothing was written"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("invalid push: stderr lacks %q:\n%s", want, errOut)
		}
	}

	code, _, errOut = runBinary(t, "rules", "push", "--expect-version", v1, src, file("four.yaml", rules("4")))
	if code != 1 || !strings.Contains(errOut, "at version "+v2+", not "+v1) {
		t.Errorf("stale push: exit %d, %q; want 1 naming version %s", code, errOut, v2)
	}

	code, out, errOut = runBinary(t, "rules", "get", src)
	if code != 0 || out != rules("3") || !strings.Contains(errOut, ": version "+v2+",") {
		t.Errorf("get: exit %d, stdout %q, stderr %q; want version %s's rules", code, out, errOut, v2)
	}
	code, out, _ = runBinary(t, "rules", "history", src)
	if code != 0 || !regexp.MustCompile(`(?m)^`+v2+` +current .* ok\n`+v1+` +\d+ .* ok$`).MatchString(out) {
		t.Errorf("history: exit %d\n%s", code, out)
	}

	code, out, errOut = runBinary(t, "rules", "rollback", src, v1)
	if code != 0 || !strings.Contains(out, "restores version "+v1) {
		t.Fatalf("rollback: exit %d, %q %q", code, out, errOut)
	}
	v3 := pushed(out)
	eventually.True(t, 30*time.Second, func() bool {
		_, body := send(t, "GET", g.admin+"/rules")
		return strings.Contains(body, `"version":"`+v3+`"`)
	}, "the gateway did not take the rollback\n%s", g.logs)
	if n, _ := countAdmitted(t, 1, g.proxy+"/v1", "X-App-Id", "app-1"); n != 0 {
		t.Errorf("after the rollback: admitted %d, want 0 (limit 1, 3 spent)", n)
	}

	for _, args := range [][]string{
		{"rules", "push", src},
		{"rules", "push", filepath.Join(dir, "local.yaml"), bad},
		{"rules", "rollback", src, "latest"},
		{"rules", "push", "--keep-history", "-1", src, bad},
		{"rules", "nonsense"},
	} {
		if code, _, errOut := runBinary(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
	etcd.Stop()
	if code, _, errOut := runBinary(t, "rules", "get", "--timeout", "1s", src); code != 1 || !strings.Contains(errOut, "reading "+src) {
		t.Errorf("get with etcd down: exit %d, %q; want 1", code, errOut)
	}
}

// TestEndToEndRulesPushZooKeeper runs the binary serving from a
// ZooKeeper znode with digest credentials from the environment, and
// pushes to it through the binary: the push is taken; without the
// credentials the znode cannot be read, and the message says what to set.
func TestEndToEndRulesPushZooKeeper(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	zk := zktest.Start(t)
	src := zk.URL("/gateway/rules")
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "zk-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []string{"GATEWAY_ZK_USERNAME=gateway", "GATEWAY_ZK_PASSWORD=s3cret"}
	file := func(name, limit string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("configs:\n- appId: app-1\n  limits:\n  - {api: /v1, limit: "+limit+", unit: 1h}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	code, out, errOut := runBinaryEnv(t, creds, "rules", "push", src, file("one.yaml", "1"))
	if code != 0 || !strings.Contains(out, ": version 0 (was none)") {
		t.Fatalf("first push: exit %d, %q %q", code, out, errOut)
	}
	g := startGateway(t, creds, "--upstream", up.URL, "--config", src)
	if n, _ := countAdmitted(t, 2, g.proxy+"/v1", "X-App-Id", "app-1"); n != 1 {
		t.Errorf("on version 0: admitted %d of 2, want 1", n)
	}
	code, out, errOut = runBinaryEnv(t, nil, "rules", "push", "--zk-username", "gateway", "--zk-password-file", pwFile, "--expect-version", "0", src, file("three.yaml", "3"))
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
	if code, _, errOut := runBinaryEnv(t, nil, "rules", "get", src); code != 1 || !strings.Contains(errOut, "GATEWAY_ZK_USERNAME") {
		t.Errorf("get without credentials: exit %d, %q; want 1 naming GATEWAY_ZK_USERNAME", code, errOut)
	}
	if code, _, errOut := runBinaryEnv(t, creds, "rules", "get", "--zk-password-file", pwFile, src); code != 2 {
		t.Errorf("GATEWAY_ZK_PASSWORD and --zk-password-file: exit %d, %q; want 2", code, errOut)
	}
}
