package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEndToEndReplay records traffic with `gateway serve --access-log` and
// replays the log with `gateway replay`: under the rules it was recorded
// with, the replay admits and limits what the live gateway did; under
// other rules, what those allow.
func TestEndToEndReplay(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	dir := t.TempDir()
	rules := func(user, anyone int) string {
		path := filepath.Join(dir, "rules-"+strconv.Itoa(user)+".yaml")
		body := "configs:\n  - appId: app-1\n    limits:\n      - api: /v1/user\n        limit: " + strconv.Itoa(user) + "\n        unit: 1h\n" +
			"  - appId: \"*\"\n    limits:\n      - api: /\n        limit: " + strconv.Itoa(anyone) + "\n        unit: 1h\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	current, candidate := rules(3, 5), rules(10, 1)
	accessLog := filepath.Join(dir, "access.log")
	g := startGateway(t, nil, "--upstream", up.URL, "--config", current, "--access-log", accessLog)
	if n, _ := countAdmitted(t, 8, g.proxy+"/v1/user/42", "X-App-Id", "app-1"); n != 3 {
		t.Fatalf("app-1: admitted %d of 8, want 3", n)
	}
	if n, _ := countAdmitted(t, 4, g.proxy+"/anything"); n != 4 {
		t.Fatalf("unknown caller: admitted %d of 4, want 4", n)
	}
	if code, _ := send(t, "GET", g.proxy+"/v1/user", "X-App-Id", "bad id!"); code != 400 {
		t.Fatalf("bad app ID: got %d, want 400", code)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.done:
		g.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}

	report := filepath.Join(dir, "report.html")
	tests := []struct {
		name string
		args []string
		want []string // lines of the summary, as regular expressions
	}{
		{
			name: "the recorded rules",
			args: []string{"--rules", current},
			want: []string{
				`^Replayed 12 requests from 1 file in `,
				`^  not replayed: 1 invalid request \(answered 400, 401 or 403 before any limit\)$`,
				`^  app-1  /v1/user +8 +3 +5  \(62\.5%\)$`,
				`^  \* +/ +4 +4 +0 +\(0\.0%\)$`,
			},
		},
		{
			name: "a candidate against them",
			args: []string{"--rules", candidate, "--baseline", current, "--report", report},
			want: []string{
				`^Newly limited callers`,
				`^  127\.0\.0\.1 \(unknown caller\) +4 +0  → +3  \(75\.0%\)$`,
				`^No longer limited callers`,
				`^  app-1 +8 +5  → +0  \(0\.0%\)$`,
				`^  app-1  /v1/user +8 +5  → +0 +\(0\.0%\) +-5$`,
				`^  \* +/ +4 +0  → +3  \(75\.0%\) +\+3$`,
				`^Report: ` + regexp.QuoteMeta(report) + `$`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runBinary(t, append([]string{"replay"}, append(tt.args, accessLog)...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			lines := strings.Split(out, "\n")
			for _, w := range tt.want {
				re := regexp.MustCompile(w)
				found := false
				for _, l := range lines {
					if re.MatchString(l) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no line matches %s:\n%s", w, out)
				}
			}
		})
	}
	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(page), `<path class="series `); got != 4*3 {
		t.Errorf("report: %d series, want 12 (4 in each of 3 charts)", got)
	}
}

func TestReplayCommandErrors(t *testing.T) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "configs:\n  - appId: app-1\n    limits:\n      - api: /v1/user\n        limit: 3\n")
	bad := write("bad.yaml", "configs:\n  - appId: app-1\n    limits:\n      - api: /v1/user\n        limit: -5\n      - api: v1/order\n        limit: 1\n")
	line := `{"time":"2026-11-21T12:00:00.000Z","msg":"access","app_id":"app-1","method":"GET","path":"/v1/user","client_ip":"203.0.113.7"}`
	log := write("access.log", line+"\n"+"garbage\n"+line+"\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStderr bool
		absent   string // a file that must not exist afterwards
	}{
		{name: "malformed lines are reported", args: []string{"--rules", good, log}, code: 0,
			stdout: []string{"Replayed 2 requests", "malformed:  1 line skipped:", "access.log:2: not JSON"}, noStderr: true},
		{name: "strict", args: []string{"--rules", good, "--strict", log}, code: 1,
			stdout: []string{"access.log:2: not JSON"}, stderr: []string{"1 malformed line(s) in the access log (--strict)"}},
		{name: "invalid candidate", args: []string{"--rules", bad, log}, code: 1,
			stderr: []string{"bad.yaml:5: ", "bad.yaml:6: ", "bad.yaml: 2 error(s)"}},
		{name: "invalid baseline", args: []string{"--rules", good, "--baseline", bad, log}, code: 1,
			stderr: []string{"bad.yaml:5: ", "bad.yaml: 2 error(s)"}},
		{name: "missing rule file", args: []string{"--rules", filepath.Join(dir, "nope.yaml"), log}, code: 1,
			stderr: []string{"nope.yaml"}},
		{name: "missing log", args: []string{"--rules", good, "--report", filepath.Join(dir, "r.html"), log, filepath.Join(dir, "missing.log")}, code: 1,
			stderr: []string{"opening access log", "missing.log"}, absent: filepath.Join(dir, "r.html")},
		{name: "no log", args: []string{"--rules", good}, code: 2, stderr: []string{"no access log given"}},
		{name: "no rules", args: []string{log}, code: 2, stderr: []string{"--rules is required"}},
		{name: "negative window", args: []string{"--rules", good, "--reorder-window", "-1s", log}, code: 2, stderr: []string{"--reorder-window -1s is negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runBinary(t, append([]string{"replay"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if tt.noStderr && errOut != "" {
				t.Errorf("stderr: got %q, want nothing", errOut)
			}
			if tt.absent != "" {
				if _, err := os.Stat(tt.absent); err == nil {
					t.Errorf("%s was left behind", tt.absent)
				}
			}
		})
	}
}
