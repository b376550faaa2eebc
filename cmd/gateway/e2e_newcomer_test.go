package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// TestVersionFlag checks that `gateway --version` (and -v) succeeds and
// prints what `gateway version` prints.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	code, want, errOut := runBinary(t, "version")
	if code != 0 || !strings.HasPrefix(want, "gateway ") {
		t.Fatalf("gateway version: exit %d, %q %q", code, want, errOut)
	}
	for _, flag := range []string{"--version", "-v"} {
		code, out, errOut := runBinary(t, flag)
		if code != 0 || out != want {
			t.Errorf("gateway %s: got exit %d, %q %q, want exit 0, %q", flag, code, out, errOut, want)
		}
	}
}

// TestMissingArgumentsNamed checks that a command called with too few or
// too many arguments says what it expects, with its usage line, and exits
// 2.
func TestMissingArgumentsNamed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"validate without a file", []string{"validate"}, "gateway validate expects FILE|DIR, got none; usage: gateway validate FILE|DIR"},
		{"validate with two", []string{"validate", "a.yaml", "b.yaml"}, `gateway validate expects FILE|DIR, got 2 argument(s) ["a.yaml" "b.yaml"]`},
		{"match without a path", []string{"match"}, "gateway match expects PATH, got none; usage: gateway match --config FILE"},
		{"rules push with one", []string{"rules", "push", "etcd://127.0.0.1:1/k"}, "gateway rules push expects SOURCE FILE, got 1 argument(s)"},
		{"usage without an app", []string{"usage"}, "gateway usage expects APP, got none"},
		{"top with one", []string{"top", "x"}, `gateway top takes no arguments, got ["x"]`},
	}
	for _, tt := range tests {
		code, _, errOut := runBinary(t, tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "arg(s)") {
			t.Errorf("%s: gateway %s: got exit %d, %q, want exit 2 and %q", tt.name, strings.Join(tt.args, " "), code, errOut, tt.want)
		}
	}
}

// TestMatchFromRuleStore checks that `gateway match --config` reads the
// rules from etcd and ZooKeeper as `gateway serve` does.
func TestMatchFromRuleStore(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("configs:\n- appId: app-7\n  limits:\n  - {api: /v1/store, limit: 7, unit: 1h}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	zk := zktest.Start(t)
	zkCreds := []string{"GATEWAY_ZK_USERNAME=gateway", "GATEWAY_ZK_PASSWORD=s3cret"}
	tests := []struct {
		name string
		src  string
		env  []string
	}{
		{"etcd", etcd.URL("/gateway/rules"), nil},
		{"zookeeper", zk.URL("/gateway/rules"), zkCreds},
	}
	for _, tt := range tests {
		if code, out, errOut := runBinaryEnv(t, tt.env, "rules", "push", tt.src, rules); code != 0 {
			t.Fatalf("%s: rules push: exit %d %q %q", tt.name, code, out, errOut)
		}
		code, out, errOut := runBinaryEnv(t, tt.env, "match", "--config", tt.src, "--app", "app-7", "/v1/store/1")
		if code != 0 || !strings.Contains(out, "/v1/store") || !strings.Contains(out, "7") || errOut != "" {
			t.Errorf("%s: match --config %s: got exit %d, %q %q, want the rule /v1/store and nothing on stderr", tt.name, tt.src, code, out, errOut)
		}
	}
	// A store that does not answer is an error that names it, not a
	// missing file.
	src := "etcd://127.0.0.1:1/gateway/rules"
	code, _, errOut := runBinary(t, "match", "--config", src, "--timeout", "1s", "/v1")
	if code != 1 || !strings.Contains(errOut, src) || strings.Contains(errOut, "no such file") {
		t.Errorf("match --config %s (nothing listening): got exit %d, %q, want exit 1 naming the store", src, code, errOut)
	}
}

// TestJSONLogDurations checks that the JSON log writes a duration as Go
// writes it ("30s"), not as nanoseconds, on the real binary.
func TestJSONLogDurations(t *testing.T) {
	t.Parallel()
	g := startGateway(t, nil, "--demo-upstream", "--shutdown-timeout", "30s")
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, func() bool { return strings.Contains(g.logs.String(), `"msg":"stopped"`) },
		"the gateway did not stop on SIGTERM\n%s", g.logs)
	logs := g.logs.String()
	if !strings.Contains(logs, `"timeout":"30s"`) || strings.Contains(logs, "30000000000") {
		t.Errorf("the drain's log lines: got\n%s\nwant \"timeout\":\"30s\"", logs)
	}
}

// TestLogDurations checks both log formats' durations.
func TestLogDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format logFormat
		want   string
	}{
		{"json", logJSON, `"timeout":"1.5s","group":{"wait":"250ms"}`},
		{"text", logText, `timeout=1.5s group.wait=250ms`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		newLogger(&buf, tt.format, levelFlag{}).Info("m", "timeout", 1500*time.Millisecond, slog.Group("group", "wait", 250*time.Millisecond))
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("%s: got %q, want %q in it", tt.name, buf.String(), tt.want)
		}
	}
}

// TestArgNames checks the names a usage error gives for the arguments a
// command's Use line ends with.
func TestArgNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, use, want string
	}{
		{"one", "validate FILE|DIR", "FILE|DIR"},
		{"two", "push SOURCE FILE", "SOURCE FILE"},
		{"after flags", "match --config FILE [--app ID] [--method M] PATH", "PATH"},
		{"a flag's value is not an argument", "match --config FILE", ""},
		{"none", "health", ""},
	}
	for _, tt := range tests {
		if got := strings.Join(argNames(tt.use), " "); got != tt.want {
			t.Errorf("%s: argNames(%q): got %q, want %q", tt.name, tt.use, got, tt.want)
		}
	}
}
