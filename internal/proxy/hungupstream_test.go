package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestUpstreamThatStopsReadingTimesOut: an upstream that accepts the
// connection and never reads the request's body stalls the gateway's
// writes once the sockets' buffers are full; each write is bounded by the
// upstream timeout (--upstream-timeout, or a route's timeout), so the
// client gets 504 upstream_timeout rather than waiting for as long as it
// keeps sending. (The wait for the response's headers, which the timeout
// also bounds, starts only once the whole request is written.)
func TestUpstreamThatStopsReadingTimesOut(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held, never read
		}
	}()
	t.Run("upstream", func(t *testing.T) {
		g := newGWWith(t, `
configs:
  - appId: app-1
    limits:
      - api: /upload
        limit: 100
        unit: 1h
`, "http://"+ln.Addr().String(), &upstreamRecorder{}, func(_ *HandlerConfig, uc *UpstreamConfig) {
			uc.Timeout = 300 * time.Millisecond
		})
		srv := httptest.NewServer(g.h)
		t.Cleanup(srv.Close)
		uploadTimesOut(t, srv.URL)
	})
	t.Run("route", func(t *testing.T) {
		g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: hung, targets: [http://%s]}]
routes: [{path: /upload, upstream: hung, timeout: 300ms}]
`+anyApp, ln.Addr()), "")
		uploadTimesOut(t, g.srv.URL)
	})
}

// uploadTimesOut sends POST /upload with a body far past any socket
// buffer to the gateway at url, and checks that it answers 504
// upstream_timeout.
func uploadTimesOut(t *testing.T, url string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	const size = 256 << 20
	go func() {
		if _, err := fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nX-App-Id: app-1\r\nContent-Length: %d\r\n\r\n", size); err != nil {
			return
		}
		io.Copy(c, io.LimitReader(zeros{}, size)) // until the gateway answers and closes
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the upstream does not read: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), `"error":"upstream_timeout"`) {
		t.Errorf("got %d %s, want 504 upstream_timeout", resp.StatusCode, body)
	}
}
