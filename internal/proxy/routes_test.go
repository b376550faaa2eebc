package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// named is a real upstream that answers its name and the path it got,
// and counts its requests.
type named struct {
	*httptest.Server
	name string
	n    atomic.Int64
}

func newNamed(t *testing.T, name string) *named {
	t.Helper()
	u := &named{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.n.Add(1)
		switch r.URL.Path {
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			return
		case "/upload":
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%s got %d bytes", name, n)
			return
		}
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// routed is a gateway with routes, served on a real listener.
type routed struct {
	h   *Handler
	srv *httptest.Server
	reg *upstream.Registry
	obs *observed
	top *observe.Top
}

func (g *routed) compile(t *testing.T, rules string, noDefault bool) *ruleset.Set {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatalf("parsing rules: %v", err)
	}
	rs, err := ruleset.CompileWith(parsed, t0, ruleset.CompileOptions{Routes: &ruleset.RouteOptions{
		Registry: g.reg, Forwarder: RouteForwarder(UpstreamConfig{Logger: slog.New(slog.DiscardHandler)}), NoDefault: noDefault,
	}})
	if err != nil {
		t.Fatalf("compiling rules: %v", err)
	}
	return rs
}

// reload puts rules in force as the server's reloader does.
func (g *routed) reload(t *testing.T, rules string) {
	t.Helper()
	rs := g.compile(t, rules, false)
	g.h.SetRules(rs)
	g.reg.Commit(rs.Upstreams())
}

// newRouted returns a gateway with rules; defaultURL is --upstream ("" for
// none).
func newRouted(t *testing.T, rules, defaultURL string) *routed {
	t.Helper()
	reg, err := upstream.New(upstream.Config{ResponseHeaderTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g := &routed{reg: reg, obs: &observed{more: make(chan struct{}, 1)}, top: observe.NewTop(observe.TopConfig{})}
	rs := g.compile(t, rules, defaultURL == "")
	reg.Commit(rs.Upstreams())
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var up http.Handler = http.NotFoundHandler()
	if defaultURL != "" {
		u, _ := url.Parse(defaultURL)
		if up, err = NewUpstream(UpstreamConfig{URL: u, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
	}
	g.h, err = NewHandler(HandlerConfig{Rules: rs, Store: store, Upstream: up, Observers: []observe.Observer{g.top, g.obs}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g.srv = httptest.NewServer(g.h)
	t.Cleanup(g.srv.Close)
	return g
}

// get sends GET path with the Host header host through the gateway and
// returns the status and body.
func (g *routed) get(t *testing.T, host, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.srv.URL+path, nil)
	if host != "" {
		req.Host = host
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s%s: %v", host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const anyApp = `
configs:
  - appId: "*"
    limit: -1
`

func TestRoutesChooseByHostThenPath(t *testing.T) {
	t.Parallel()
	users1, users2, billing, admin, def := newNamed(t, "users1"), newNamed(t, "users2"), newNamed(t, "billing"), newNamed(t, "admin"), newNamed(t, "default")
	rules := fmt.Sprintf(`
upstreams:
  - name: users
    targets: [%s, %s]
  - name: billing
    targets: [%s]
  - name: admin
    targets: [%s]
routes:
  - host: admin.example.com
    path: /
    upstream: admin
  - host: "*.example.com"
    path: /v1
    upstream: billing
    name: wild-v1
  - path: /v1/users
    upstream: users
    stripPrefix: true
    name: users
  - path: /v1/users/{id}/invoices
    upstream: billing
`+anyApp, users1.URL, users2.URL, billing.URL, admin.URL)
	g := newRouted(t, rules, def.URL)
	tests := []struct {
		host, path string
		want       string // the upstream's answer, "users" for either target
		route      string
	}{
		{host: "admin.example.com", path: "/v1/users/7", want: "admin /v1/users/7", route: "admin.example.com/"},
		{host: "ADMIN.example.com:8443", path: "/x", want: "admin /x", route: "admin.example.com/"},
		{host: "api.example.com", path: "/v1/users/7", want: "billing /v1/users/7", route: "wild-v1"},
		{host: "example.com", path: "/v1/users/7", want: "users /7", route: "users"},
		{host: "other.test", path: "/v1/users/7", want: "users /7", route: "users"},
		{host: "other.test", path: "/v1/users", want: "users /", route: "users"},
		{host: "other.test", path: "/v1/usersx", want: "default /v1/usersx", route: ""},
		{host: "other.test", path: "/V1/Users/7/invoices/2", want: "billing /V1/Users/7/invoices/2", route: "/v1/users/{id}/invoices"},
		{host: "other.test", path: "/v1/./users/../users/8", want: "users /8", route: "users"},
	}
	for i, tt := range tests {
		code, body := g.get(t, tt.host, tt.path)
		body = strings.Replace(strings.Replace(body, "users1", "users", 1), "users2", "users", 1)
		if code != 200 || body != tt.want {
			t.Errorf("%s%s: got %d %q, want 200 %q", tt.host, tt.path, code, body, tt.want)
		}
		g.obs.waitFor(t, i+1)
		if got := g.obs.last().Route; got != tt.route {
			t.Errorf("%s%s: outcome route %q, want %q", tt.host, tt.path, got, tt.route)
		}
	}
}

func TestTopNamesTheRoutes(t *testing.T) {
	t.Parallel()
	a, b := newNamed(t, "a"), newNamed(t, "b")
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: a, targets: [%s]}, {name: b, targets: [%s]}]
routes: [{path: /a, upstream: a, name: ra}, {path: /b, upstream: b, name: rb}]
configs:
  - appId: "*"
    limits:
      - api: /
        limit: 1000
`, a.URL, b.URL), "")
	for _, p := range []string{"/a/1", "/b/2", "/a/3"} {
		if code, _ := g.get(t, "", p); code != 200 {
			t.Fatalf("%s: got %d", p, code)
		}
	}
	g.obs.waitFor(t, 3)
	snap := g.top.Snapshot(time.Now(), "")
	if len(snap) != 1 || strings.Join(snap[0].Routes, ",") != "ra,rb" {
		t.Errorf("/top: got %+v, want the limit / with routes ra and rb", snap)
	}
}

func TestNoRouteIs404WithoutUpstream(t *testing.T) {
	t.Parallel()
	a := newNamed(t, "a")
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: a, targets: [%s]}]
routes: [{path: /api, upstream: a}]
`+anyApp, a.URL), "")
	if code, body := g.get(t, "", "/api/x"); code != 200 || body != "a /api/x" {
		t.Errorf("routed: got %d %q", code, body)
	}
	code, body := g.get(t, "", "/other")
	if code != 404 || !strings.Contains(body, `"no_route"`) {
		t.Errorf("unrouted: got %d %s, want 404 no_route", code, body)
	}
}

func TestPoolWithNoHealthyTargetIs503(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(up.Close)
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: gone, targets: [%s], healthCheck: {path: /healthz, unhealthy: 1}}]
routes: [{path: /, upstream: gone}]
`+anyApp, up.URL), "")
	failing.Store(true)
	g.reg.Current().Check(context.Background(), time.Now())
	code, body := g.get(t, "", "/x")
	var e struct{ Error, Message string }
	json.Unmarshal([]byte(body), &e)
	if code != http.StatusServiceUnavailable || e.Error != "no_healthy_upstream" || !strings.Contains(e.Message, "gone") {
		t.Errorf("got %d %s, want 503 no_healthy_upstream naming the upstream", code, body)
	}
}

// TestOnlyTargetIsNeverEjected sends requests that fail on the only
// target of a pool: refused, timed out, answered 500. Each gets the
// error it met, never a 503 for an empty pool that would hit every
// caller.
func TestOnlyTargetIsNeverEjected(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/one/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/one/err" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	g := newRouted(t, fmt.Sprintf(`
upstreams:
  - {name: gone, targets: [%s]}
  - {name: one, targets: [%s], outlier: {statuses: [5xx]}}
routes:
  - {path: /gone, upstream: gone}
  - {path: /one, upstream: one}
  - {path: /one/slow, upstream: one, timeout: 100ms}
`+anyApp, dead, slow.URL), "")
	for _, tt := range []struct {
		path string
		want int
	}{
		{"/gone/x", http.StatusBadGateway},
		{"/one/slow", http.StatusGatewayTimeout},
		{"/one/err", http.StatusInternalServerError},
	} {
		for i := range 2 * upstream.DefaultFailures {
			if code, body := g.get(t, "", tt.path); code != tt.want {
				t.Fatalf("%s, request %d: got %d %s, want %d", tt.path, i, code, body, tt.want)
			}
		}
	}
	if code, _ := g.get(t, "", "/one/ok"); code != http.StatusOK {
		t.Errorf("after the failures: got %d, want 200 from the pool's only target", code)
	}
	for _, p := range g.reg.Current().Pools() {
		if !p.Ready(time.Now()) {
			t.Errorf("pool %s: not ready, want its only target kept", p.Name())
		}
	}
}

func TestKilledTargetIsAvoided(t *testing.T) {
	t.Parallel()
	a, b := newNamed(t, "a"), newNamed(t, "b")
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: ab, targets: [%s, %s]}]
routes: [{path: /, upstream: ab}]
`+anyApp, a.URL, b.URL), "")
	for range 20 {
		if code, _ := g.get(t, "", "/x"); code != 200 {
			t.Fatalf("before: got %d", code)
		}
	}
	if a.n.Load() == 0 || b.n.Load() == 0 {
		t.Fatalf("a target got no request: a %d, b %d", a.n.Load(), b.n.Load())
	}
	a.Close()
	// Until the dead target is ejected, a request may meet a keep-alive
	// connection the target closed as it went, which is not resent (it
	// may have reached it); a refused connection is retried on b.
	before := 0
	target := g.reg.Current().Pool("ab").Targets()[0]
	for target.State(time.Now()).State != "ejected" {
		if code, _ := g.get(t, "", "/x"); code != 200 {
			before++
		}
		if before > 100 {
			t.Fatalf("the dead target is not ejected after %d failed requests", before)
		}
	}
	bBefore := b.n.Load()
	for i := range 200 {
		if code, body := g.get(t, "", "/x"); code != 200 {
			t.Fatalf("request %d after the dead target was ejected: got %d %s", i, code, body)
		}
	}
	if got := b.n.Load() - bBefore; got != 200 {
		t.Errorf("the live target got %d of 200 requests, want all", got)
	}
}

func TestReloadPoolsUnderLoad(t *testing.T) {
	t.Parallel()
	a, b, c := newNamed(t, "a"), newNamed(t, "b"), newNamed(t, "c")
	pool := func(targets ...*named) string {
		var urls []string
		for _, u := range targets {
			urls = append(urls, u.URL)
		}
		return fmt.Sprintf(`
upstreams: [{name: p, targets: [%s]}]
routes: [{path: /, upstream: p}]
`+anyApp, strings.Join(urls, ", "))
	}
	g := newRouted(t, pool(a, b), "")
	stop := make(chan struct{})
	// ticks gets one value per answered request (or fewer, when full):
	// the test waits on it for traffic between reloads.
	ticks := make(chan struct{}, 1<<12)
	var failed, sent atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := g.srv.Client()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(g.srv.URL + "/x")
				sent.Add(1)
				select {
				case ticks <- struct{}{}:
				default:
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	sets := [][]*named{{a, b, c}, {b, c}, {c}, {a, c}, {c}}
	for _, s := range sets {
		// Each reload lands while requests flow: wait for some on the
		// rules in force.
		drain(ticks)
		for range 50 {
			<-ticks
		}
		g.reload(t, pool(s...))
	}
	drain(ticks)
	cBefore := c.n.Load()
	for range 100 {
		<-ticks
	}
	close(stop)
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Errorf("%d of %d requests failed across the reloads, want none", f, sent.Load())
	}
	// After the last reload only c serves (requests in flight at the
	// swap may still finish on the pool they started on).
	if got := c.n.Load() - cBefore; got < 90 {
		t.Errorf("c got %d requests after the last reload, want the ~100 sent", got)
	}
}

func TestRoutesPassStreamsUpgradesAndLargeBodies(t *testing.T) {
	t.Parallel()
	s := newNamed(t, "s")
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		conn.Write([]byte("echo " + line))
	}))
	t.Cleanup(ws.Close)
	g := newRouted(t, fmt.Sprintf(`
upstreams:
  - name: s
    targets: [%s, %s]
  - name: ws
    targets: [%s]
routes: [{path: /, upstream: s}, {path: /ws, upstream: ws}]
`+anyApp, s.URL, newNamed(t, "s2").URL, ws.URL), "")

	// SSE: events arrive as written.
	resp, err := http.Get(g.srv.URL + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "data: 0\n\ndata: 1\n\ndata: 2\n\n"; string(b) != want {
		t.Errorf("SSE: got %q, want %q", b, want)
	}

	// A large body goes through whole.
	const size = 8 << 20
	resp, err = http.Post(g.srv.URL+"/upload", "application/octet-stream", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(b), fmt.Sprintf("got %d bytes", size)) {
		t.Errorf("upload: got %q", b)
	}

	// WebSocket: the upgrade passes and the connection carries bytes
	// both ways.
	conn, err := net.Dial("tcp", g.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	wresp, err := http.ReadResponse(br, nil)
	if err != nil || wresp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v, %v; want 101", wresp, err)
	}
	conn.Write([]byte("hi\n"))
	line, _ := br.ReadString('\n')
	if line != "echo hi\n" {
		t.Errorf("upgraded: got %q, want %q", line, "echo hi\n")
	}
}

// drain empties c of what it holds now.
func drain(c chan struct{}) {
	for len(c) > 0 {
		<-c
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestRouteTimeoutIs504(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	fast := newNamed(t, "fast")
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: slow, targets: [%s]}, {name: fast, targets: [%s]}]
routes:
  - {path: /slow, upstream: slow, timeout: 100ms}
  - {path: /, upstream: fast}
`+anyApp, slow.URL, fast.URL), "")
	code, body := g.get(t, "", "/slow")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, `"upstream_timeout"`) {
		t.Errorf("route with a timeout: got %d %s, want 504 upstream_timeout", code, body)
	}
	if code, _ := g.get(t, "", "/other"); code != 200 {
		t.Errorf("another route: got %d, want 200", code)
	}
}

// TestRoutesPassEarlyHints checks that a 1xx response of a pool's target
// reaches the client, as through --upstream: the pool's own trace keeps
// the reverse proxy's.
func TestRoutesPassEarlyHints(t *testing.T) {
	t.Parallel()
	hints := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</app.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		return s
	}
	g := newRouted(t, fmt.Sprintf(`
upstreams: [{name: s, targets: [%s, %s]}]
routes: [{path: /, upstream: s}]
`+anyApp, hints().URL, hints().URL), "")
	for i := range 4 {
		var links []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints {
				links = append(links, h.Get("Link"))
			}
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, g.srv.URL+"/x", nil)
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Errorf("request %d: got %d %q, want 200 ok", i, resp.StatusCode, b)
		}
		if len(links) != 1 || links[0] != "</app.css>; rel=preload" {
			t.Errorf("request %d: early hints %q, want one with the Link header", i, links)
		}
	}
}
