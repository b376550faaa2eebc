package proxy

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// rawRequest sends one GET request line and headers over TCP as written,
// so that nothing on the client side cleans the target, and returns the
// status code.
func rawRequest(t *testing.T, addr, target string, headers ...string) int {
	t.Helper()
	return rawMethod(t, addr, "GET", target, headers...)
}

// rawMethod is rawRequest with the method as written.
func rawMethod(t *testing.T, addr, method, target string, headers ...string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s: reading response: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestNoBypassThroughThePath sends encodings of a blocked path and of an
// allowed one through the real server and checks that the upstream sees
// either nothing or exactly the path that was matched and counted.
func TestNoBypassThroughThePath(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/admin
        limit: 0
      - api: /v1/user
        limit: 100000
`)
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	const blocked = "blocked" // 429 by the /v1/admin rule: the upstream sees nothing
	const invalid = "invalid" // 400 before matching: the upstream sees nothing
	tests := []struct {
		target string
		// want is blocked, invalid, or the decoded path the upstream must
		// receive.
		want string
	}{
		{"/v1/admin", blocked},
		{"//v1/admin", blocked},
		{"/v1//admin", blocked},
		{"/v1/admin//", blocked},
		{"/v1/./admin", blocked},
		{"/./v1/admin", blocked},
		{"/v1/x/../admin", blocked},
		{"/v1/../v1/admin", blocked},
		{"/../v1/admin", blocked},
		{"/v1/admin/", blocked},
		{"/v1/admin/.", blocked},
		{"/v1/admin/x/..", blocked},
		{"/v1/admin/sub", blocked},
		{"/v1/%61dmin", blocked},
		{"/v1/adm%69n", blocked},
		{"/v1/ad%6Din", blocked},
		{"/v1/ad%6din", blocked},
		{"/%76%31/%61%64%6d%69%6e", blocked},
		{"/v1/%2e/admin", blocked},
		{"/v1/x/%2e%2e/admin", blocked},
		{"/v1/x/%2E%2E/admin", blocked},
		{"/v1/x/.%2e/admin", blocked},
		{"/v1/admin;jsessionid=1", blocked},
		{"/v1;x=1/admin", blocked},
		{"/v1/admin%3Bx", blocked},
		{"/v1/admin?x=1", blocked},
		{"/v1/admin?/../user", blocked},
		{"http://gateway.test/v1/admin", blocked},
		{"http://elsewhere.test//v1/./admin", blocked},
		{"/v1%2Fadmin", invalid},
		{"/v1%2fadmin", invalid},
		{"/v1/admin%2F", invalid},
		{"/v1/x/..%2Fadmin", invalid},
		{"/v1%5Cadmin", invalid},
		{"/v1%5cadmin", invalid},
		{`/v1\admin`, invalid},
		{`/v1/x\..\admin`, invalid},
		{"/v1/admin%00", invalid},
		{"/v1/admin%09", invalid},
		{"/v1/%C0%AEadmin", invalid},
		{"/v1/%c0%ae%c0%ae/v1/admin", invalid},
		{"/v1/%ff", invalid},
		{"/v1/admin%", invalid},
		{"/v1/admin%2", invalid},
		{"/v1/admin%zz", invalid},
		{"*", invalid},
		// Not the blocked resource: forwarded, exactly as counted.
		{"/v1/user/42", "/v1/user/42"},
		{"/v1//user/./42", "/v1/user/42"},
		{"/v1/user;a=b/42;c", "/v1/user/42"},
		{"/v1/%75ser/42", "/v1/user/42"},
		{"/v1/admin#frag", "/v1/admin#frag"},
		{"/v1/admin%23frag", "/v1/admin#frag"},
		// Paths match case-insensitively by default: an upstream that
		// ignores case would serve these as /v1/admin.
		{"/v1/ADMIN", blocked},
		{"/V1/ADMIN", blocked},
		{"/v1/ADMIN/", blocked},
		{"/v1/admi%4E", blocked},
		{"/v1/Adm%69n/x", blocked},
		// Letters outside ASCII that fold to ASCII ones: refused.
		{"/v1/u%C5%BFer", invalid},
		{"/v1/%E2%84%AAey", invalid},
		{"/v1/admin..;", "/v1/admin.."},
		{"/v1/%2561dmin", "/v1/%61dmin"},
		{"/v1/admin%20", "/v1/admin "},
	}
	for _, tt := range tests {
		before, observed := len(g.up.seen()), g.obs.count()
		code := rawRequest(t, addr, tt.target, "X-App-Id: app-1")
		seen := g.up.seen()[before:]
		switch tt.want {
		case blocked:
			if code != http.StatusTooManyRequests || len(seen) != 0 {
				t.Errorf("%s: got %d, upstream saw %q; want 429 and nothing upstream", tt.target, code, seen)
			}
		case invalid:
			if code != http.StatusBadRequest || len(seen) != 0 {
				t.Errorf("%s: got %d, upstream saw %q; want 400 and nothing upstream", tt.target, code, seen)
			}
		default:
			want := (&url.URL{Path: tt.want}).EscapedPath()
			if code != http.StatusOK || len(seen) != 1 || seen[0] != want {
				t.Errorf("%s: got %d, upstream saw %q; want 200 and %q", tt.target, code, seen, want)
				continue
			}
			g.obs.waitFor(t, observed+1)
			if got := g.obs.last().Path; got != tt.want {
				t.Errorf("%s: counted path %q, forwarded %q", tt.target, got, tt.want)
			}
		}
	}
	if len(tests) < 50 {
		t.Fatalf("only %d encodings", len(tests))
	}
}
