package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
)

// binary is the gateway built once for the end-to-end tests.
var binary string

// raceEnv spares each run of a race-enabled binary the race detector's
// one-second pause at exit.
const raceEnv = "GORACE=atexit_sleep_ms=0"

// TestMain builds the gateway for the end-to-end tests, with the race
// detector when the tests have it; under -short it builds nothing and
// those tests skip.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gateway-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gateway")
	args := []string{"build", "-o", binary}
	if raceDetector {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gateway:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gatewayCmd returns the command that runs the built gateway with args,
// from the repository root (where configs/ lives); the test skips under
// -short, which builds no gateway.
func gatewayCmd(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), raceEnv)
	return cmd
}

// running is a gateway process started by a test.
type running struct {
	cmd   *exec.Cmd
	proxy string // http://host:port
	admin string
	done  chan error
	logs  *gwtest.Log
}

// startGateway runs `gateway serve` with args and env and waits until it
// listens; it reads the bound addresses from its "gateway listening" log.
func startGateway(t *testing.T, env []string, args ...string) *running {
	t.Helper()
	cmd := gatewayCmd(t, context.Background(), append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &running{cmd: cmd, done: make(chan error, 1), logs: &gwtest.Log{}}
	ready := make(chan struct{})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() {
		for line := range lines {
			g.logs.WriteString(line + "\n")
			var rec struct{ Msg, Proxy, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway listening" {
				g.proxy, g.admin = "http://"+rec.Proxy, "http://"+rec.Admin
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
		t.Fatalf("gateway exited before listening: %v\n%s", err, g.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not listen within 30s")
	}
	return g
}

func send(t *testing.T, method, url string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// countAdmitted sends n requests and returns how many got 200; every other
// answer must be 429.
func countAdmitted(t *testing.T, n int, url string, hdr ...string) (admitted int, lastBody string) {
	t.Helper()
	for i := 0; i < n; i++ {
		code, body := send(t, "GET", url, hdr...)
		switch code {
		case 200:
			admitted++
		case 429:
			lastBody = body
		default:
			t.Fatalf("request %d to %s: got %d %s", i, url, code, body)
		}
	}
	return admitted, lastBody
}

// TestEndToEndShippedRules runs the binary on the shipped rule file, as
// the container and the systemd unit do: every caller, whatever app ID it
// claims and whatever key it sends (the README's demo key included), is
// an unknown caller limited per client address.
func TestEndToEndShippedRules(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := startGateway(t, nil, "--upstream", up.URL)
	if n, _ := countAdmitted(t, 70, g.proxy+"/v1/user", "X-App-Id", "partner-1", "X-Api-Key", "demo-key"); n != 60 {
		t.Errorf("partner-1 with the demo key: admitted %d of 70, want 60 (the per-address limit of unknown callers)", n)
	}
	if n, _ := countAdmitted(t, 3, g.proxy+"/v1/user", "X-App-Id", "app-1"); n != 0 {
		t.Errorf("app-1 from the same address: admitted %d, want 0: it is an unknown caller too", n)
	}
	if _, body := send(t, "GET", g.admin+"/rules"); !strings.Contains(body, `"appId":"*"`) || strings.Contains(body, `"appId":"app-1"`) {
		t.Errorf("/rules: %s, want only the \"*\" section", body)
	}
}

func TestEndToEndExampleRules(t *testing.T) {
	var upstreamHits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	// The upstream comes from the environment, the way containers set it.
	g := startGateway(t, []string{"GATEWAY_UPSTREAM=" + up.URL, "GATEWAY_TRUSTED_PROXIES=127.0.0.1/32", "GATEWAY_CONFIG=configs/demo-rules.yaml"})

	// An API rule: app-1 may GET /v1/user/{id}/orders 10 times a minute.
	n, body := countAdmitted(t, 15, g.proxy+"/v1/user/42/orders", "X-App-Id", "app-1")
	if n != 10 {
		t.Errorf("app-1 orders: admitted %d of 15, want 10", n)
	}
	if !strings.Contains(body, `"api":"/v1/user/{id}/orders"`) {
		t.Errorf("app-1 orders 429 body: got %s", body)
	}

	// An app total: app-2 may send 30 a minute in all, though its
	// /v1/user rule alone would allow 50.
	n, body = countAdmitted(t, 40, g.proxy+"/v1/user/7", "X-App-Id", "app-2")
	if n != 30 {
		t.Errorf("app-2 total: admitted %d of 40, want 30", n)
	}
	if !strings.Contains(body, `"app":"app-2","api":"","limit":30`) {
		t.Errorf("app-2 429 body: got %s", body)
	}

	// Unknown callers: 20 a minute per client IP, the IP taken from
	// X-Forwarded-For because the peer (127.0.0.1) is a trusted proxy.
	n, _ = countAdmitted(t, 25, g.proxy+"/anything", "X-Forwarded-For", "203.0.113.1")
	if n != 20 {
		t.Errorf("unknown caller A: admitted %d of 25, want 20", n)
	}
	n, _ = countAdmitted(t, 5, g.proxy+"/anything", "X-Forwarded-For", "203.0.113.2")
	if n != 5 {
		t.Errorf("unknown caller B: admitted %d of 5, want 5", n)
	}
	if got, want := upstreamHits.Load(), int64(10+30+20+5); got != want {
		t.Errorf("upstream hits: got %d, want %d", got, want)
	}

	// Bad input gets a JSON 400.
	if code, body := send(t, "GET", g.proxy+"/v1/user", "X-App-Id", "bad id!"); code != 400 || !strings.Contains(body, "invalid_app_id") {
		t.Errorf("bad app ID: got %d %s", code, body)
	}

	// The admin port.
	if code, _ := send(t, "GET", g.admin+"/healthz"); code != 200 {
		t.Errorf("/healthz: got %d", code)
	}
	if code, body := send(t, "GET", g.admin+"/rules"); code != 200 || !strings.Contains(body, `"sha256"`) || !strings.Contains(body, `"appId":"app-1"`) {
		t.Errorf("/rules: got %d %s", code, body)
	}
	code, metrics := send(t, "GET", g.admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: got %d", code)
	}
	for _, want := range []string{
		`gateway_requests_total{api="/v1/user/{id}/orders",app="app-1",decision="allowed"} 10`,
		`gateway_requests_total{api="/v1/user/{id}/orders",app="app-1",decision="limited"} 5`,
		`gateway_requests_total{api="/v1/user",app="app-2",decision="limited"} 10`,
		`gateway_requests_total{api="/",app="*",decision="allowed"} 25`,
		`gateway_rules_reloads_total{result="success"} 1`,
		`gateway_rules_reloads_total{result="failure"} 0`,
		`gateway_upstream_responses_total{code="200"} 65`,
		`gateway_build_info{goversion=`,
		`process_resident_memory_bytes`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestEndToEndGracefulShutdown(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "late but whole")
	}))
	defer up.Close()
	g := startGateway(t, nil, "--upstream", up.URL)

	type result struct {
		code int
		body string
	}
	got := make(chan result, 1)
	go func() {
		code, body := send(t, "GET", g.proxy+"/v1/health", "X-App-Id", "app-1")
		got <- result{code, body}
	}()
	<-arrived
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The in-flight request is still being served; release it.
	close(release)
	r := <-got
	if r.code != 200 || r.body != "late but whole" {
		t.Errorf("in-flight request: got %d %q, want 200 and the whole body", r.code, r.body)
	}
	if err := g.waitExit(t, "SIGTERM"); err != nil {
		t.Errorf("gateway exit: %v\n%s", err, g.logs)
	}
}

// waitExit waits, up to a generous 30s, for the gateway process to exit
// after what the test did (named by after), and returns how it exited.
func (g *running) waitExit(t *testing.T, after string) error {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- nil // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not exit 30s after %s\n%s", after, g.logs)
		return nil
	}
}

func TestEndToEndDemoUpstream(t *testing.T) {
	g := startGateway(t, nil, "--demo-upstream", "--config", "configs/demo-rules.yaml")
	code, body := send(t, "GET", g.proxy+"/v1/user/42", "X-App-Id", "app-1")
	if code != 200 || !strings.Contains(body, `"upstream":"demo"`) || !strings.Contains(body, `"path":"/v1/user/42"`) {
		t.Errorf("demo upstream: got %d %s", code, body)
	}
}

func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runBinaryEnv(t, nil, args...)
}

// runBinaryEnv runs the gateway with args and env added to the
// environment, and returns its exit code, stdout and stderr.
func runBinaryEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := gatewayCmd(t, context.Background(), args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestValidateCommand(t *testing.T) {
	code, out, _ := runBinary(t, "validate", "configs/ratelimiter-rule.yaml")
	if code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("validate example: exit %d, out %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: -5
      - api: v1/order
        limit: 1
        colour: red
`), 0o644)
	code, _, errOut := runBinary(t, "validate", bad)
	if code != 1 {
		t.Errorf("validate bad: exit %d, want 1", code)
	}
	for _, want := range []string{"bad.yaml:5:", "bad.yaml:6:", "bad.yaml:8:", "3 error(s)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate bad: output lacks %q:\n%s", want, errOut)
		}
	}
	if code, _, _ := runBinary(t, "validate"); code != 2 {
		t.Errorf("validate without a file: exit %d, want 2", code)
	}
}

func TestMatchCommand(t *testing.T) {
	code, out, errOut := runBinary(t, "match", "--config", "configs/demo-rules.yaml", "--app", "app-1", "--method", "GET", "/v1//user/42/orders")
	if code != 0 {
		t.Fatalf("match: exit %d: %s", code, errOut)
	}
	for _, want := range []string{`normalized to "/v1/user/42/orders"`, "app total 1000 per 1m0s", "applies: rule /v1/user/{id}/orders", "skipped: rule /v1/user "} {
		if !strings.Contains(out, want) {
			t.Errorf("match output lacks %q:\n%s", want, out)
		}
	}
}

func TestVersionAndUsage(t *testing.T) {
	code, out, _ := runBinary(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gateway ") {
		t.Errorf("version: exit %d %q", code, out)
	}
	if code, _, errOut := runBinary(t, "serve", "--no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("unknown flag: exit %d %q", code, errOut)
	}
	code, _, errOut := runBinary(t, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errOut, "no upstream") {
		t.Errorf("serve without upstream: exit %d %q", code, errOut)
	}
	cmd := gatewayCmd(t, context.Background(), "serve", "--demo-upstream")
	cmd.Env = append(cmd.Env, "GATEWAY_LOG_LEVEL=loud")
	outB, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(outB), "--log-level") {
		t.Errorf("bad GATEWAY_LOG_LEVEL: %v %s", err, outB)
	}
}

func TestEndToEndHotReload(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	rules := func(limit int) string {
		return fmt.Sprintf("configs:\n  - appId: app-1\n    limits:\n      - api: /v1/user\n        limit: %d\n        unit: 1h\n", limit)
	}
	if err := os.WriteFile(path, []byte(rules(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, nil, "--upstream", up.URL, "--config", path)
	if n, _ := countAdmitted(t, 5, g.proxy+"/v1/user", "X-App-Id", "app-1"); n != 3 {
		t.Fatalf("initial: admitted %d of 5, want 3", n)
	}

	// Raise the limit by editing the file the way editors do (write a
	// temp file, rename it over): the 3 spent stay spent, and the new
	// limit of 6 must be in force without a restart (the reload takes
	// about the 100ms debounce; the deadline only stops a broken watcher
	// from hanging the test).
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(rules(6)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	for {
		code, _ := send(t, "GET", g.proxy+"/v1/user", "X-App-Id", "app-1")
		if code == 200 {
			break
		}
		if time.Since(edited) > 10*time.Second {
			t.Fatalf("the new limit was not in force 10s after the edit\n%s", g.logs)
		}
		// Poll on the reload itself rather than on a timer.
		send(t, "GET", g.admin+"/rules")
	}
	t.Logf("new limit in force %v after the edit", time.Since(edited))
	if n, _ := countAdmitted(t, 5, g.proxy+"/v1/user", "X-App-Id", "app-1"); n != 2 {
		t.Errorf("after raising to 6 with 4 spent: admitted %d of 5, want 2", n)
	}

	// A broken edit is rejected and reported; the rules stay.
	if err := os.WriteFile(path, []byte("configs: [oops"), 0o644); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually.True(t, 10*time.Second, func() bool {
		_, body = send(t, "GET", g.admin+"/rules")
		return strings.Contains(body, `"lastError"`)
	}, "the broken edit was never reported\n%s", g.logs)
	if !strings.Contains(body, "rules.yaml:1") {
		t.Errorf("/rules lastError does not name the file and line: %s", body)
	}
	if code, _ := send(t, "GET", g.proxy+"/v1/user", "X-App-Id", "app-1"); code != 429 {
		t.Errorf("after a broken edit: got %d, want 429 from the rules in force", code)
	}

	// SIGHUP reloads too.
	if err := os.WriteFile(path, []byte(rules(100)), 0o644); err != nil {
		t.Fatal(err)
	}
	g.cmd.Process.Signal(syscall.SIGHUP)
	eventually.True(t, 10*time.Second, func() bool {
		code, _ := send(t, "GET", g.proxy+"/v1/user", "X-App-Id", "app-1")
		return code == 200
	}, "the fixed file never came into force\n%s", g.logs)
}

// TestEndToEndXMLRules checks that validate and serve take an XML rule
// file by its extension, and that validate reports its problems at their
// lines.
func TestEndToEndXMLRules(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.xml")
	os.WriteFile(good, []byte(`<rules>
  <config appId="app-1">
    <limit api="/v1/user" limit="1" unit="1m"/>
  </config>
</rules>
`), 0o644)
	if code, out, errOut := runBinary(t, "validate", good); code != 0 || !strings.Contains(out, "ok: 1 app section(s), 1 api rule(s)") {
		t.Errorf("validate rules.xml: exit %d, out %q %q", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.xml")
	os.WriteFile(bad, []byte(`<rules>
  <config appId="app-1">
    <limit api="/v1/user"
           limit="-5"/>
    <limit api="v1/order" limit="1" colour="red"/>
  </config>
</rules>
`), 0o644)
	code, _, errOut := runBinary(t, "validate", bad)
	if code != 1 {
		t.Errorf("validate bad.xml: exit %d, want 1", code)
	}
	for _, want := range []string{"bad.xml:4: limit -5", "bad.xml:5: unknown field \"colour\"", "bad.xml:5: ", "3 error(s)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate bad.xml: output lacks %q:\n%s", want, errOut)
		}
	}

	g := startGateway(t, nil, "--demo-upstream", "--config", good)
	for i, want := range []int{200, 429} {
		if code, body := send(t, "GET", g.proxy+"/v1/user/42", "X-App-Id", "app-1"); code != want {
			t.Errorf("request %d: got %d %s, want %d", i+1, code, body, want)
		}
	}
}
