package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// A request whose body the gateway cannot read from the client is the
// client's failure, never its target's (docs/routes.md, "Health"): it is
// answered 400 bad_request_body (docs/rules.md, the error table), and
// the targets of the pool stay in it however often it comes. That a
// target that really fails is still ejected is TestKilledTargetIsAvoided.

// newBodyFailPool returns a gateway routing every path to a pool of two
// real targets.
func newBodyFailPool(t *testing.T) *routed {
	t.Helper()
	a, b := newNamed(t, "a"), newNamed(t, "b")
	return newRouted(t, fmt.Sprintf(`
upstreams: [{name: ab, targets: [%s, %s]}]
routes: [{path: /, upstream: ab}]
`+anyApp, a.URL, b.URL), "")
}

// sendRaw writes req, as is, on a new connection to addr; half closes
// the connection after it when halfClose is set, and returns the
// connection.
func sendRaw(t *testing.T, addr, req string, halfClose bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	if halfClose {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// readBadBody reads the response on c and checks that it is the 400
// bad_request_body JSON error, its message naming cause.
func readBadBody(t *testing.T, c net.Conn, cause string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct{ Error, Message string }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%d %v: the body %q is not JSON: %v", resp.StatusCode, resp.Header, body, err)
	}
	if resp.StatusCode != http.StatusBadRequest || e.Error != "bad_request_body" || !strings.Contains(e.Message, cause) {
		t.Fatalf("got %d %s, want 400 bad_request_body naming %q", resp.StatusCode, body, cause)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

// checkTargetsUntouched fails t unless every target of the pool ab is
// healthy, with no failure counted and no ejection.
func (g *routed) checkTargetsUntouched(t *testing.T) {
	t.Helper()
	for _, s := range g.reg.Current().Pool("ab").States(time.Now()) {
		if s.State != "healthy" || s.Failures != 0 || s.Ejections != 0 {
			t.Errorf("target %s: state %s, %d failures, %d ejections; want healthy, none counted", s.URL, s.State, s.Failures, s.Ejections)
		}
	}
}

// TestMalformedChunkedBodyIsNotTheTargets sends, over raw connections,
// requests whose chunked body has a malformed chunk size (RFC 9112
// §7.1), more of them than eject a target: each gets 400
// bad_request_body naming the chunk length, no target of the pool has a
// failure counted, and the pool still serves.
func TestMalformedChunkedBodyIsNotTheTargets(t *testing.T) {
	t.Parallel()
	g := newBodyFailPool(t)
	const req = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
	for range 4 * upstream.DefaultFailures {
		readBadBody(t, sendRaw(t, g.srv.Listener.Addr().String(), req, false), "chunk length")
	}
	g.checkTargetsUntouched(t)
	if code, body := g.get(t, "", "/x"); code != http.StatusOK {
		t.Errorf("after the broken bodies: got %d %s, want 200", code, body)
	}
}

// TestTruncatedBodyIsNotTheTargets sends requests whose body ends before
// its Content-Length (RFC 9112 §6.2) because the client closed the
// connection mid-body, half or fully, more of them than eject a target:
// each is recorded as 499 (the client went away), and no target of the
// pool has a failure counted.
func TestTruncatedBodyIsNotTheTargets(t *testing.T) {
	t.Parallel()
	g := newBodyFailPool(t)
	const req = "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n0123456789"
	for i := range 4 * upstream.DefaultFailures {
		c := sendRaw(t, g.srv.Listener.Addr().String(), req, i%2 == 0)
		if i%2 == 1 {
			c.Close()
		}
		// The outcome is reported once the handler is done, and the pool
		// counted the try before.
		g.obs.waitFor(t, i+1)
		if s := g.obs.last().Status; s != StatusClientClosed {
			t.Fatalf("request %d: a body cut short by its client was recorded as %d, want %d", i, s, StatusClientClosed)
		}
	}
	g.checkTargetsUntouched(t)
	if code, body := g.get(t, "", "/x"); code != http.StatusOK {
		t.Errorf("after the cut bodies: got %d %s, want 200", code, body)
	}
}

// TestBrokenBodyToSingleUpstream is the same for --upstream, whose
// requests go through the proxy's own Transport and no pool: a malformed
// chunked body is 400 bad_request_body, not 502.
func TestBrokenBodyToSingleUpstream(t *testing.T) {
	t.Parallel()
	up := newNamed(t, "single")
	g := newLiveGW(t, up.URL)
	const req = "POST /x HTTP/1.1\r\nHost: x\r\nX-App-Id: app-1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
	readBadBody(t, sendRaw(t, strings.TrimPrefix(g.url, "http://"), req, false), "chunk length")
	if n := g.upstreamErrors("client_body"); n != 1 {
		t.Errorf("gateway_upstream_errors_total{kind=client_body} = %v, want 1", n)
	}
	if n := g.upstreamErrors("failed"); n != 0 {
		t.Errorf("gateway_upstream_errors_total{kind=failed} = %v, want 0", n)
	}
	if strings.Contains(g.logs(), "upstream request failed") {
		t.Errorf("the client's broken body was logged as an upstream failure:\n%s", g.logs())
	}
}
