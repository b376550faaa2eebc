package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

// heldUpstream answers each request only once release is closed, and
// counts the requests that arrived.
type heldUpstream struct {
	*httptest.Server
	arrived chan struct{}
	release chan struct{}
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{arrived: make(chan struct{}, 100), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.arrived <- struct{}{}
		select {
		case <-u.release:
			io.WriteString(w, "late but whole")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// inFlight sends n requests through g that the held upstream keeps, and
// waits until all of them reached it. The result of each comes on the
// channel: the status, or 0 if the request failed.
func (u *heldUpstream) inFlight(t *testing.T, g *running, n int) <-chan int {
	t.Helper()
	results := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("GET", g.proxy+"/v1/health", nil)
			req.Header.Set("X-App-Id", "app-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- 0
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != "late but whole" {
				results <- 0
				return
			}
			results <- resp.StatusCode
		}()
	}
	for i := range n {
		select {
		case <-u.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d requests reached the upstream\n%s", i, n, g.logs)
		}
	}
	return results
}

// TestEndToEndDrain checks the drain on SIGTERM: /readyz turns 503
// draining, SIGHUPs during the drain neither kill the gateway nor cut a
// request, and every request in flight finishes whole before it exits 0.
func TestEndToEndDrain(t *testing.T) {
	up := newHeldUpstream(t)
	g := startGateway(t, nil, "--upstream", up.URL)
	results := up.inFlight(t, g, 3)
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually.True(t, 10*time.Second, func() bool {
		var code int
		code, body = send(t, "GET", g.admin+"/readyz")
		return code == 503
	}, "/readyz never 503 during the drain\n%s", g.logs)
	if want := `"status":"draining"`; !strings.Contains(body, want) {
		t.Errorf("/readyz while draining: got %s, want %s", body, want)
	}
	for range 2 {
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// Their default action would end the process at once: the requests
	// below would fail and the exit would not be 0.
	close(up.release)
	for i := range 3 {
		if code := <-results; code != 200 {
			t.Errorf("in-flight request %d: got %d, want 200 and the whole body", i, code)
		}
	}
	if err := g.waitExit(t, "the drain"); err != nil {
		t.Errorf("gateway exit: %v\n%s", err, g.logs)
	}
}

// TestEndToEndSecondSignalExits checks that a second SIGTERM (or SIGINT)
// during the drain exits at once, with status 1, without waiting for the
// requests in flight.
func TestEndToEndSecondSignalExits(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			up := newHeldUpstream(t)
			g := startGateway(t, nil, "--upstream", up.URL, "--shutdown-timeout", "5m")
			results := up.inFlight(t, g, 1)
			if err := g.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 10*time.Second, func() bool { return strings.Contains(g.logs.String(), "send it again to exit at once") },
				"no drain logged after the first %s\n%s", sig, g.logs)
			if err := g.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := g.waitExit(t, "a second "+sig.String()+", with a 5m drain")
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("exit after the second %s: got %v, want status 1\n%s", sig, err, g.logs)
			}
			close(up.release)
			if code := <-results; code == 200 {
				t.Errorf("the request in flight was answered 200; the exit should have cut it off")
			}
		})
	}
}
