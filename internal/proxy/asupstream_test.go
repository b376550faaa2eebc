package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// served serves g's handler over a real loopback server and returns its
// address.
func served(t *testing.T, g *gw) string {
	t.Helper()
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// upstreamSaw returns what the upstream recorder has seen: methods and
// headers, by request.
func (u *upstreamRecorder) saw() ([]string, []http.Header) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.methods...), append([]http.Header(nil), u.hdrs...)
}

// TestMethodsAsTheUpstreamSeesThem checks that a spent method-restricted
// limit cannot be passed with another spelling of its method, HEAD, or a
// method override, over a real server with requests written as sent.
func TestMethodsAsTheUpstreamSeesThem(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/read
        method: [GET]
        limit: 1
        unit: 1h
      - api: /v1/write
        method: [POST]
        limit: 1
        unit: 1h
      - api: /v1/probe
        method: [HEAD]
        limit: 1
        unit: 1h
      - api: /v1/probe
        method: [GET]
        limit: 100
        unit: 1h
`)
	addr := served(t, g)
	app := "X-App-Id: app-1"
	steps := []struct {
		name           string
		method, target string
		headers        []string
		want           int
	}{
		{"GET spends the GET limit", "GET", "/v1/read", nil, 200},
		{"HEAD is a GET", "HEAD", "/v1/read", nil, 429},
		{"lower-case get", "get", "/v1/read", nil, 429},
		{"mixed-case Get", "Get", "/v1/read", nil, 429},
		{"POST overridden to GET", "POST", "/v1/read", []string{"X-HTTP-Method-Override: GET"}, 429},
		{"POST overridden to get by _method", "POST", "/v1/read?_method=get", nil, 429},
		{"POST spends the POST limit", "POST", "/v1/write", nil, 200},
		{"post in lower case", "post", "/v1/write", nil, 429},
		{"GET overriding to POST is a GET", "GET", "/v1/write", []string{"X-HTTP-Method-Override: POST"}, 200},
		{"GET with _method=POST is a GET", "GET", "/v1/write?_method=POST&x=1", nil, 200},
		{"conflicting overrides", "POST", "/v1/write?_method=PUT", []string{"X-HTTP-Method: DELETE"}, 400},
		{"an explicit HEAD rule wins", "HEAD", "/v1/probe", nil, 200},
		{"HEAD limit spent", "HEAD", "/v1/probe", nil, 429},
		{"GET has its own rule", "GET", "/v1/probe", nil, 200},
	}
	for _, st := range steps {
		if got := rawMethod(t, addr, st.method, st.target, append([]string{app}, st.headers...)...); got != st.want {
			t.Errorf("%s: %s %s: got %d, want %d", st.name, st.method, st.target, got, st.want)
		}
	}
	// What reached the upstream: the two GETs that claimed to be POSTs
	// carry no override the upstream could act on.
	methods, hdrs := g.up.saw()
	paths := g.up.seen()
	for i := range methods {
		if strings.HasPrefix(paths[i], "/v1/write") && methods[i] == "GET" {
			if v := hdrs[i].Get("X-Http-Method-Override"); v != "" || strings.Contains(paths[i], "_method") {
				t.Errorf("upstream got GET %s with override %q: want every override removed", paths[i], v)
			}
			if strings.Contains(paths[i], "_method") || (strings.Contains(paths[i], "?") && !strings.HasSuffix(paths[i], "?x=1")) {
				t.Errorf("upstream got %s: want the query without _method, the rest as sent", paths[i])
			}
		}
	}
}

// TestMethodOverrideStrip checks --method-override strip: the POST is
// matched as a POST and the upstream never sees the override.
func TestMethodOverrideStrip(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/write
        method: [POST]
        limit: 1
        unit: 1h
`, func(h *HandlerConfig, _ *UpstreamConfig) { h.MethodOverride = OverrideStrip })
	addr := served(t, g)
	if got := rawMethod(t, addr, "POST", "/v1/write?_method=DELETE", "X-App-Id: app-1", "X-HTTP-Method-Override: DELETE"); got != 200 {
		t.Fatalf("first POST: got %d, want 200", got)
	}
	if got := rawMethod(t, addr, "POST", "/v1/write", "X-App-Id: app-1", "X-HTTP-Method-Override: DELETE"); got != 429 {
		t.Errorf("second POST, overridden: got %d, want 429 (matched as the POST it is)", got)
	}
	_, hdrs := g.up.saw()
	if paths := g.up.seen(); len(paths) != 1 || paths[0] != "/v1/write" || hdrs[0].Get("X-Http-Method-Override") != "" {
		t.Errorf("upstream saw %v %v: want one POST /v1/write without an override", paths, hdrs)
	}
}

// TestUpgradeAllowList checks that only allowed upgrades open a tunnel:
// an upstream that answers 101 to anything gets no request through an
// Upgrade: raw or h2c tunnel, and never sees the Upgrade header.
func TestUpgradeAllowList(t *testing.T) {
	t.Parallel()
	var tunnels, upgrades atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "plain")
			return
		}
		upgrades.Add(1)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
		brw.Flush()
		tunnels.Add(1)
		// Serve HTTP requests inside the tunnel, as a lenient upstream
		// would: each one would reach it uncounted.
		for {
			req, err := http.ReadRequest(brw.Reader)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\ninside")
			brw.Flush()
		}
	}))
	t.Cleanup(up.Close)
	g := newGWWith(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/secret
        limit: 1
        unit: 1h
`, up.URL, nil)
	addr := served(t, g)
	for _, upgrade := range []string{"raw", "h2c", "websocket, raw"} {
		t.Run(upgrade, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /v1/other HTTP/1.1\r\nHost: gw\r\nX-App-Id: app-1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: %s\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", upgrade)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "plain" {
				t.Errorf("got %d %q, want the upstream's plain 200: no upgrade", resp.StatusCode, body)
			}
			// A request for the spent /v1/secret sent next on the same
			// connection is an ordinary, counted request.
			for i := range 3 {
				fmt.Fprintf(c, "GET /v1/secret HTTP/1.1\r\nHost: gw\r\nX-App-Id: app-1\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if i > 0 && resp.StatusCode != 429 {
					t.Errorf("request %d for /v1/secret on the connection: got %d, want 429", i, resp.StatusCode)
				}
			}
		})
	}
	if n, m := upgrades.Load(), tunnels.Load(); n != 0 || m != 0 {
		t.Errorf("the upstream saw %d upgrade requests and opened %d tunnels, want none", n, m)
	}
}

// TestKeyOnlyForItsApp checks that an app's API key gets 401 on a request
// counted under another app or as an unknown caller, and never reaches
// the upstream there; a key that is no app's passes through.
func TestKeyOnlyForItsApp(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-k
    keys: ["`+digest("k-secret")+`"]
    limits:
      - api: /
        limit: 1
        unit: 1h
  - appId: app-2
    limits:
      - api: /
        limit: 100
  - appId: "*"
    limits:
      - api: /
        limit: 100
`)
	addr := served(t, g)
	tests := []struct {
		name    string
		headers []string
		want    int
	}{
		{"its own app", []string{"X-App-Id: app-k", "X-Api-Key: k-secret"}, 200},
		{"its own app, spent", []string{"X-App-Id: app-k", "X-Api-Key: k-secret"}, 429},
		{"another app", []string{"X-App-Id: app-2", "X-Api-Key: k-secret"}, 401},
		{"no app", []string{"X-Api-Key: k-secret"}, 401},
		{"an unknown app", []string{"X-App-Id: nobody", "X-Api-Key: k-secret"}, 401},
		{"a key that is no app's", []string{"X-App-Id: app-2", "X-Api-Key: the-upstream-s-own"}, 200},
	}
	for _, tt := range tests {
		if got := rawRequest(t, addr, "/v1/x", tt.headers...); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
	_, hdrs := g.up.saw()
	for i, h := range hdrs {
		if h.Get("X-Api-Key") == "k-secret" {
			t.Errorf("upstream request %d carried app-k's key", i)
		}
	}
	if len(hdrs) != 2 {
		t.Errorf("upstream saw %d requests, want 2", len(hdrs))
	}
}

// TestIPv6AddressGroups checks that 240 addresses of one /64 share one
// per-IP counter, and that --ipv6-prefix 128 restores one per address.
func TestIPv6AddressGroups(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: "*"
    limits:
      - api: /
        limit: 5
        unit: 1h
`
	for _, tt := range []struct {
		prefix int
		want   int
	}{{0, 5}, {128, 240}} {
		t.Run(fmt.Sprintf("prefix %d", tt.prefix), func(t *testing.T) {
			g := newGW(t, rules, func(h *HandlerConfig, _ *UpstreamConfig) { h.IPv6Prefix = tt.prefix })
			admitted := 0
			base := netip.MustParseAddr("2001:db8:1:2::")
			for i := range 240 {
				a := base.As16()
				a[15], a[9] = byte(i), byte(i*7)
				r := httptest.NewRequest("GET", "/x", nil)
				r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom16(a), 4000).String()
				w := httptest.NewRecorder()
				g.h.ServeHTTP(w, r)
				if w.Code == 200 {
					admitted++
				}
			}
			if admitted != tt.want {
				t.Errorf("admitted %d of 240 addresses of one /64, want %d", admitted, tt.want)
			}
		})
	}
	// IPv4 stays one counter per address by default.
	g := newGW(t, rules)
	for i := range 10 {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", i)
		w := httptest.NewRecorder()
		if g.h.ServeHTTP(w, r); w.Code != 200 {
			t.Errorf("IPv4 address %d: got %d, want 200: one counter per address", i, w.Code)
		}
	}
}

// TestClientAddressHeaders checks what the upstream learns about the
// client: through a trusted proxy, the incoming X-Forwarded-For chain with
// the peer appended; otherwise only the peer; and X-Real-IP always the
// address the gateway decided, whatever the client sent. --preserve-host
// keeps the client's Host.
func TestClientAddressHeaders(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, tt := range []struct {
		name     string
		trusted  []netip.Prefix
		wantXFF  string
		wantReal string
	}{
		{"trusted peer", trusted, "203.0.113.9, 10.1.2.3, 127.0.0.1", "10.1.2.3"},
		{"untrusted peer", nil, "127.0.0.1", "127.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, basicRules, func(h *HandlerConfig, u *UpstreamConfig) {
				h.TrustedProxies, u.TrustedProxies = tt.trusted, tt.trusted
			})
			addr := served(t, g)
			if got := rawRequest(t, addr, "/v1/free", "X-App-Id: app-1", "X-Forwarded-For: 203.0.113.9, 10.1.2.3",
				"X-Real-IP: 6.6.6.6", "Forwarded: for=6.6.6.6"); got != 200 {
				t.Fatalf("got %d", got)
			}
			_, hdrs := g.up.saw()
			h := hdrs[0]
			if got := h.Get("X-Forwarded-For"); got != tt.wantXFF {
				t.Errorf("X-Forwarded-For: got %q, want %q", got, tt.wantXFF)
			}
			if got := h.Values("X-Real-Ip"); len(got) != 1 || got[0] != tt.wantReal {
				t.Errorf("X-Real-IP: got %q, want %q", got, tt.wantReal)
			}
			if got := h.Get("Forwarded"); got != "" {
				t.Errorf("Forwarded: got %q, want none", got)
			}
		})
	}
	for _, preserve := range []bool{false, true} {
		g := newGW(t, basicRules, func(_ *HandlerConfig, u *UpstreamConfig) { u.PreserveHost = preserve })
		rawRequest(t, served(t, g), "/v1/free", "X-App-Id: app-1")
		g.up.mu.Lock()
		host := g.up.hosts[0]
		g.up.mu.Unlock()
		if got := host == "gateway.test"; got != preserve {
			t.Errorf("preserve host %v: the upstream got Host %q", preserve, host)
		}
	}
}

// TestOneAdmissionOneUpstreamRequest checks that a request the gateway
// admitted and counted once reaches the upstream once, even when the
// upstream closes each reused connection after reading a request without
// answering it (net/http's Transport would resend such a GET).
func TestOneAdmissionOneUpstreamRequest(t *testing.T) {
	t.Parallel()
	var hits, framed atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					hits.Add(1)
					if len(req.TransferEncoding) > 0 || req.ContentLength != 0 {
						framed.Add(1) // the empty body must not show
					}
					if n > 0 {
						return // the second request on a connection: hang up
					}
					io.Copy(io.Discard, req.Body)
					body := "ok"
					if req.Method == "HEAD" {
						body = ""
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"+body)
				}
			}(c)
		}
	}()
	g := newGWWith(t, `
configs:
  - appId: app-1
    limits:
      - api: /
        limit: 1000
        unit: 1h
`, "http://"+l.Addr().String(), nil)
	addr := served(t, g)
	admitted := 0
	for range 4 {
		for _, m := range []string{"GET", "HEAD", "OPTIONS"} {
			switch code := rawMethod(t, addr, m, "/v1/x", "X-App-Id: app-1"); code {
			case 200, 502: // admitted, and answered or cut off
				admitted++
			default:
				t.Errorf("%s: got %d, want 200 or 502", m, code)
			}
		}
	}
	g.obs.waitFor(t, 12)
	if got := hits.Load(); got != int64(admitted) || admitted != 12 {
		t.Errorf("the upstream got %d requests for %d admitted, want 12 for 12", got, admitted)
	}
	if n := framed.Load(); n != 0 {
		t.Errorf("%d requests reached the upstream with a Transfer-Encoding or a Content-Length; want none: they have no body", n)
	}
}

// TestCaseVariantsShareACounter checks the default matching: with no case
// setting in the rule file, case variants of a path are the same rule and
// share its counter (at worst over-counting for a case-sensitive
// upstream), and caseSensitive: true restores exact matching.
func TestCaseVariantsShareACounter(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/blocked
        limit: 0
      - api: /v1/user
        limit: 2
        unit: 1h
`
	addr := served(t, newGW(t, rules))
	for _, p := range []string{"/V1/BLOCKED", "/v1/BLOCKED/", "/v1/blocke%44", "/v1/Blocked/x"} {
		if got := rawRequest(t, addr, p, "X-App-Id: app-1"); got != 429 {
			t.Errorf("%s: got %d, want 429 from the blocked rule", p, got)
		}
	}
	for i, p := range []string{"/v1/user", "/V1/USER", "/v1/User"} {
		want := 200
		if i == 2 {
			want = 429
		}
		if got := rawRequest(t, addr, p, "X-App-Id: app-1"); got != want {
			t.Errorf("%s: got %d, want %d: case variants share one counter of 2", p, got, want)
		}
	}
	strict := served(t, newGW(t, "caseSensitive: true\n"+rules))
	if got := rawRequest(t, strict, "/V1/BLOCKED", "X-App-Id: app-1"); got != 200 {
		t.Errorf("caseSensitive: true: /V1/BLOCKED got %d, want 200 (no rule matches)", got)
	}
}
