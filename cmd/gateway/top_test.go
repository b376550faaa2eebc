package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

// TestTopCommand runs `gateway serve --top-keys` with a per-user limit, sends
// requests of two users and an unknown caller, and prints `gateway top`
// against its admin port: one row per key, the heaviest first.
func TestTopCommand(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	body := `configs:
  - appId: app-1
    limits:
      - api: /v1/profile
        by: header:X-User-Id
        limit: 2
        unit: 1m
  - appId: "*"
    limits:
      - api: /
        limit: 100
        unit: 1m
`
	if err := os.WriteFile(rules, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// --top-keys: the values as they are, to check how the table shows
	// them (hashes are checked in the server's TestTopEndpoint).
	g := startGateway(t, nil, "--upstream", up.URL, "--config", rules, "--top-keys")
	countAdmitted(t, 4, g.proxy+"/v1/profile", "X-App-Id", "app-1", "X-User-Id", "alice")
	countAdmitted(t, 1, g.proxy+"/v1/profile", "X-App-Id", "app-1", "X-User-Id", "bob smith")
	countAdmitted(t, 1, g.proxy+"/anything")

	var out string
	eventually.True(t, 30*time.Second, func() bool {
		code, stdout, stderr := runBinary(t, "top", "--admin", g.admin)
		if code != 0 {
			t.Fatalf("gateway top: exit %d, stderr %s", code, stderr)
		}
		out = stdout
		return strings.Contains(out, "127.0.0.1") && strings.Contains(out, "bob")
	}, "gateway top never listed every key:\n%s", outputOf{&out})
	for _, want := range []string{
		`(?m)^APP +RULE +BY +KEY +COUNT +±ERR +ADMITTED +LIMITED$`,
		`(?m)^\* +/ +ip +127\.0\.0\.1 +1 +0 +1 +0$`,
		`(?m)^app-1 +/v1/profile +header:X-User-Id +alice +4 +0 +2 +2\n` +
			`app-1 +/v1/profile +header:X-User-Id +"bob smith" +1 +0 +1 +0$`,
		`(?m)^Top 32 keys per limit since \d\d:\d\d:\d\d, at `,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("gateway top: output does not match %s:\n%s", want, out)
		}
	}

	code, out, _ := runBinary(t, "top", "--admin", g.admin, "--app", "app-2")
	if code != 0 || !strings.Contains(out, "No keyed limit was hit") {
		t.Errorf("gateway top --app app-2: exit %d, output %q, want 0 and no limits", code, out)
	}
}

func TestTopCommandErrors(t *testing.T) {
	// A port nothing listens on: bound, then closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{name: "not a URL", args: []string{"--admin", "127.0.0.1:9090"}, wantCode: 2, wantStderr: "is not an http:// URL"},
		{name: "nothing listening", args: []string{"--admin", closed}, wantCode: 1, wantStderr: "reading " + closed + "/top"},
		{name: "an argument", args: []string{"app-1"}, wantCode: 2, wantStderr: "gateway top takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runBinary(t, append([]string{"top"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.wantCode, tc.wantStderr)
			}
		})
	}
}

// outputOf prints the output it points to when formatted, so that a
// failure message shows the last one.
type outputOf struct{ s *string }

func (o outputOf) String() string { return *o.s }
