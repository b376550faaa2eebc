package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRefusalDoesNotWaitForTheBody sends, from a real client socket,
// requests that the gateway refuses with a Content-Length of 200000 and
// no body byte: each must get its response, and the connection must be
// closed, without the gateway waiting for the body.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	busy := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/busy" {
			busy <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	g := newGWWith(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/limited
        limit: 1
        unit: 1h
      - api: /v1/blocked
        limit: 0
      - api: /v1/busy
        concurrency: 1
  - appId: app-k
    keys:
      - `+digest("the-key")+`
    limits:
      - api: /
        limit: 100
        unit: 1h
`, up.URL, nil, func(_ *HandlerConfig, u *UpstreamConfig) {
		// The request holding /v1/busy must hold it until the subtests
		// below have run, however late a loaded machine starts them: not
		// end with a 504 at the default upstream timeout.
		u.Timeout = time.Hour
	})
	addr := served(t, g)
	// Registered after the servers' Close, so run before it.
	t.Cleanup(func() { close(release) })
	// Spend /v1/limited and take /v1/busy's one slot.
	if w := g.do("GET", "/v1/limited", "app-1"); w.Code != http.StatusOK {
		t.Fatalf("first /v1/limited: got %d, want 200", w.Code)
	}
	go func() {
		r, _ := http.NewRequest("GET", "http://"+addr+"/v1/busy?hold", nil)
		r.Header.Set("X-App-Id", "app-1")
		resp, err := http.DefaultClient.Do(r)
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-busy:
	case <-time.After(30 * time.Second):
		t.Fatal("the request holding /v1/busy never reached the upstream")
	}
	tests := []struct {
		name, path string
		hdr        string
		want       int
	}{
		{"rate limited", "/v1/limited", "X-App-Id: app-1", http.StatusTooManyRequests},
		{"blocked", "/v1/blocked", "X-App-Id: app-1", http.StatusTooManyRequests},
		{"too many in flight", "/v1/busy", "X-App-Id: app-1", http.StatusTooManyRequests},
		{"missing key", "/v1/x", "X-App-Id: app-k", http.StatusUnauthorized},
		{"invalid app ID", "/v1/x", "X-App-Id: bad id!", http.StatusBadRequest},
		{"invalid path", "/v1/a%2Fb", "X-App-Id: app-1", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Generous: a gateway that waits for the body never answers.
			c.SetDeadline(time.Now().Add(30 * time.Second))
			req := "POST " + tt.path + " HTTP/1.1\r\nHost: gateway.test\r\n" + tt.hdr + "\r\nContent-Length: 200000\r\n\r\n"
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the body: %v", err)
			}
			if resp.StatusCode != tt.want || !strings.Contains(string(body), `"message"`) {
				t.Errorf("got %d %s, want %d with a JSON reason", resp.StatusCode, body, tt.want)
			}
			if !resp.Close {
				t.Errorf("the response does not say Connection: close: %v", resp.Header)
			}
			// The connection is closed: EOF, not a wait for the body.
			if n, err := io.Copy(io.Discard, br); err != nil || n != 0 {
				t.Errorf("after the response: %d more bytes, %v; want EOF", n, err)
			}
		})
	}
}

// TestRefusalWithoutBodyKeepsTheConnection checks that only a refusal of
// a request with a body ends its connection: a refused GET leaves it open
// for the next request.
func TestRefusalWithoutBodyKeepsTheConnection(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	addr := served(t, g)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	var got []string
	for range 4 {
		if _, err := io.WriteString(c, "GET /v1/user HTTP/1.1\r\nHost: gateway.test\r\nX-App-Id: app-2\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got = append(got, resp.Status[:3])
		if resp.Close {
			t.Fatalf("response %d (%s) closes the connection", len(got), resp.Status)
		}
	}
	if s := strings.Join(got, " "); s != "200 200 429 429" {
		t.Errorf("statuses on one connection: got %s, want 200 200 429 429", s)
	}
}
