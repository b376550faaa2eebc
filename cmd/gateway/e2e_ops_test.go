package main

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

// TestEndToEndDrainDelay checks --drain-delay: on SIGTERM /readyz turns
// 503 at once while the proxy still accepts new connections and serves
// them, until the delay is over; only then does it stop accepting, drain
// and exit 0.
func TestEndToEndDrainDelay(t *testing.T) {
	t.Run("during the delay", func(t *testing.T) {
		// A delay no test outlives: the gateway is still in it when the
		// checks run, whatever the machine's load.
		g := startGateway(t, nil, "--demo-upstream", "--config", "configs/demo-rules.yaml", "--drain-delay", "1h")
		// gateway health, the Compose healthcheck, follows /readyz.
		if code, out, errOut := runBinary(t, "health", "--admin", g.admin); code != 0 || !strings.Contains(out, "200 OK") {
			t.Errorf("gateway health of a ready gateway: exit %d %s %s, want 0 and 200 OK", code, out, errOut)
		}
		if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, func() bool {
			code, _ := send(t, "GET", g.admin+"/readyz")
			return code == 503
		}, "/readyz never 503 after SIGTERM\n%s", g.logs)
		if code, _, errOut := runBinary(t, "health", "--admin", g.admin); code != 1 || !strings.Contains(errOut, "503") || !strings.Contains(errOut, "draining") {
			t.Errorf("gateway health while draining: exit %d %s, want 1 and the 503 draining answer", code, errOut)
		}
		if code, _, errOut := runBinary(t, "health", "--live", "--admin", g.admin); code != 0 {
			t.Errorf("gateway health --live while draining: exit %d %s, want 0", code, errOut)
		}
		// A new connection, not a kept-alive one, is accepted and served.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for i := range 3 {
			req, _ := http.NewRequest("GET", g.proxy+"/v1/user/42", nil)
			req.Header.Set("X-App-Id", "app-1")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("new connection %d while /readyz is 503: %v\n%s", i, err, g.logs)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request %d on a new connection during the drain delay: got %d, want 200", i, resp.StatusCode)
			}
		}
		if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := g.waitExit(t, "a second SIGTERM during the drain delay"); err == nil {
			t.Errorf("exit after a second SIGTERM: got 0, want status 1")
		} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("exit after a second SIGTERM: got %v, want status 1", err)
		}
	})
	t.Run("after the delay", func(t *testing.T) {
		g := startGateway(t, nil, "--demo-upstream", "--drain-delay", "200ms")
		if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := g.waitExit(t, "SIGTERM with a 200ms drain delay"); err != nil {
			t.Fatalf("exit: %v\n%s", err, g.logs)
		}
		logs := g.logs.String()
		delay := strings.Index(logs, "accepting new connections until the drain delay is over")
		closing := strings.Index(logs, "shutting down: no new connections")
		if delay < 0 || closing < delay {
			t.Errorf("logs: want the drain delay, then the listener closed:\n%s", logs)
		}
	})
}

// TestEndToEndSIGHUPUnchanged checks that SIGHUP with an unchanged rule
// file says so in the log and counts it in gateway_rules_reloads_total.
func TestEndToEndSIGHUPUnchanged(t *testing.T) {
	g := startGateway(t, nil, "--demo-upstream", "--config", "configs/demo-rules.yaml")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, func() bool { return strings.Contains(g.logs.String(), `"msg":"rules unchanged"`) },
		"no \"rules unchanged\" logged after SIGHUP\n%s", g.logs)
	_, metrics := send(t, "GET", g.admin+"/metrics")
	for _, want := range []string{`gateway_rules_reloads_total{result="unchanged"} 1`, `gateway_rules_reloads_total{result="success"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics after an unchanged SIGHUP lacks %s", want)
		}
	}
}
