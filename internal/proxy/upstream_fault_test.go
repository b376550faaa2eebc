package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// These tests put the real Handler, wired as Run wires it (metrics as an
// observer and as the upstream's events, one logger for the handler, the
// upstream and the server's error log), behind a real server, in front of
// a real upstream, and talk to it with a real client: a fault upstream
// must lose nothing and break nothing.

// faultRules counts every request of app-1; /ws allows one upgrade.
const faultRules = `
configs:
  - appId: app-1
    limits:
      - api: /ws
        limit: 1
        unit: 60
      - api: /
        limit: 1000000
        unit: 60
`

// liveGW is a gateway served over a real loopback server.
type liveGW struct {
	*gw
	m      *observe.Metrics
	url    string // the gateway's base URL
	client *http.Client
	log    *gwtest.Log
}

// newLiveGW serves a gateway in front of upstreamURL, with opts applied
// after the wiring.
func newLiveGW(t *testing.T, upstreamURL string, opts ...gwOption) *liveGW {
	t.Helper()
	logs := &gwtest.Log{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Version: "test"})
	wire := func(h *HandlerConfig, u *UpstreamConfig) {
		h.Logger, u.Logger = log, log
		h.Observers = append(h.Observers, m)
		u.Events = m
	}
	g := newGWWith(t, faultRules, upstreamURL, nil, append([]gwOption{wire}, opts...)...)
	srv := httptest.NewUnstartedServer(g.h)
	srv.Config.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	srv.Start()
	t.Cleanup(srv.Close)
	return &liveGW{gw: g, m: m, url: srv.URL, client: srv.Client(), log: logs}
}

// logs returns what the gateway logged so far.
func (g *liveGW) logs() string {
	return g.log.String()
}

// get sends a GET as app-1.
func (g *liveGW) get(ctx context.Context, path string) (*http.Response, error) {
	r, err := http.NewRequestWithContext(ctx, "GET", g.url+path, nil)
	if err != nil {
		return nil, err
	}
	r.Header.Set("X-App-Id", "app-1")
	return g.client.Do(r)
}

func (g *liveGW) upstreamErrors(kind string) float64 {
	return metric(g.m, "gateway_upstream_errors_total", "kind", kind)
}

// closedPortURL returns the URL of a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// waitOrFail receives from c, failing the test if nothing comes in 10s: a
// bound on a hang, not a timing assertion.
func waitOrFail[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never happened", what)
	}
	var zero T
	return zero
}

// TestRealUpstreamErrors checks that an upstream that gives no response
// gets the client the gateway's JSON error, and the metrics and the
// outcome the right kind and status.
func TestRealUpstreamErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		upstream   func(t *testing.T) string // returns the upstream URL
		timeout    time.Duration
		wantStatus int
		wantBody   string
		wantKind   string
	}{
		{
			name:       "refused",
			upstream:   closedPortURL,
			wantStatus: http.StatusBadGateway,
			wantBody:   `{"error":"upstream_unavailable","message":"the upstream could not be reached or failed"}` + "\n",
			wantKind:   "refused",
		},
		{
			name: "slower than --upstream-timeout",
			upstream: func(t *testing.T) string {
				release := make(chan struct{})
				slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}))
				t.Cleanup(slow.Close)
				t.Cleanup(func() { close(release) }) // runs before slow.Close
				return slow.URL
			},
			timeout:    200 * time.Millisecond,
			wantStatus: http.StatusGatewayTimeout,
			wantBody:   `{"error":"upstream_timeout","message":"the upstream did not answer in time"}` + "\n",
			wantKind:   "timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newLiveGW(t, tt.upstream(t), func(_ *HandlerConfig, u *UpstreamConfig) { u.Timeout = tt.timeout })
			resp, err := g.get(context.Background(), "/v1/user")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("reading the error body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || string(body) != tt.wantBody {
				t.Errorf("response: got %d %q, want %d %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if got := resp.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type: got %q, want application/json", got)
			}
			g.obs.waitFor(t, 1)
			if o := g.obs.last(); o.Status != tt.wantStatus || o.Decision != observe.DecisionAllowed {
				t.Errorf("outcome: got %d %s, want %d allowed", o.Status, o.Decision, tt.wantStatus)
			}
			for _, kind := range []string{"refused", "timeout", "failed", "client_closed"} {
				want := 0.0
				if kind == tt.wantKind {
					want = 1
				}
				if got := g.upstreamErrors(kind); got != want {
					t.Errorf("upstream errors{%s}: got %v, want %v", kind, got, want)
				}
			}
			if !strings.Contains(g.logs(), "level=WARN msg=\"upstream request failed\" status="+strconv.Itoa(tt.wantStatus)) {
				t.Errorf("logs: got %q, want a warning with status %d", g.logs(), tt.wantStatus)
			}
		})
	}
}

// TestRealUpstreamClientGone checks that a client leaving while the
// upstream thinks is recorded as 499, cancels the upstream request, and
// is not logged as an error.
func TestRealUpstreamClientGone(t *testing.T) {
	t.Parallel()
	arrived, gone := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-release:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	g := newLiveGW(t, slow.URL)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-arrived; cancel() }()
	resp, err := g.get(ctx, "/v1/slow")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the client gave up, but got a response: %d", resp.StatusCode)
	}
	waitOrFail(t, gone, "the upstream request's cancellation")
	g.obs.waitFor(t, 1)
	if o := g.obs.last(); o.Status != StatusClientClosed {
		t.Errorf("outcome status: got %d, want 499", o.Status)
	}
	if got := g.upstreamErrors("client_closed"); got != 1 {
		t.Errorf("upstream errors{client_closed}: got %v, want 1", got)
	}
	if logs := g.logs(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "upstream request failed") {
		t.Errorf("a client that went away was logged as a failure: %q", logs)
	}
}

// TestRealUpstreamResetMidResponse checks that an upstream that resets its
// connection halfway through a body makes the client's response fail, not
// end short as if complete, and leaves the gateway serving.
func TestRealUpstreamResetMidResponse(t *testing.T) {
	t.Parallel()
	const part = "the first part of the body\n"
	tests := []struct {
		name   string
		header string // the framing header of the upstream response
		body   string // what the upstream writes of the body before the reset
	}{
		{name: "content-length", header: "Content-Length: 1000000", body: part},
		{name: "chunked", header: "Transfer-Encoding: chunked", body: fmt.Sprintf("%x\r\n%s\r\n", len(part), part)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cut := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/reset" {
					io.WriteString(w, "still serving")
					return
				}
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijacking: %v", err)
					return
				}
				fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%s\r\n\r\n%s", tt.header, tt.body)
				brw.Flush()
				<-cut
				// A linger of 0 makes Close send RST, not FIN.
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}))
			t.Cleanup(up.Close)
			g := newLiveGW(t, up.URL)

			resp, err := g.get(context.Background(), "/reset")
			if err != nil {
				close(cut)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make([]byte, len(part))
			_, err = io.ReadFull(resp.Body, got)
			close(cut) // the part is through the gateway: reset now
			if err != nil || string(got) != part || resp.StatusCode != 200 {
				t.Fatalf("before the reset: got %d %q (%v), want 200 %q", resp.StatusCode, got, err, part)
			}
			rest, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Errorf("after the reset: the body ended cleanly after %d more bytes; want a read error", len(rest))
			}

			resp2, err := g.get(context.Background(), "/next")
			if err != nil {
				t.Fatalf("the request after the reset: %v", err)
			}
			body, err := io.ReadAll(resp2.Body)
			resp2.Body.Close()
			if err != nil || resp2.StatusCode != 200 || string(body) != "still serving" {
				t.Errorf("the request after the reset: got %d %q (%v), want 200 %q", resp2.StatusCode, body, err, "still serving")
			}
			// The broken request was observed (metrics, access log) with
			// the status its client was sent, before the next one.
			g.obs.waitFor(t, 2)
			g.obs.mu.Lock()
			first := g.obs.out[0]
			g.obs.mu.Unlock()
			if first.UpstreamDuration <= 0 {
				t.Errorf("the reset request's upstream duration is %v: it was forwarded", first.UpstreamDuration)
			}
			if first.Path != "/reset" || first.Status != 200 || first.Decision != observe.DecisionAllowed {
				t.Errorf("the reset request's outcome: path %q, status %d, decision %s; want /reset, 200, allowed", first.Path, first.Status, first.Decision)
			}
			if got := metric(g.m, "gateway_requests_total", "app", "app-1", "api", "/", "decision", observe.DecisionAllowed.String()); got != 2 {
				t.Errorf("requests{app-1, /, allowed}: got %v, want 2: both requests counted", got)
			}
			logs := g.logs()
			// The read error reaches the gateway's logger, not the
			// standard library's global one.
			if !strings.Contains(logs, "level=WARN msg=\"httputil: ReverseProxy read error during body copy") {
				t.Errorf("logs: got %q, want the upstream's read error as a warning", logs)
			}
			// The server does not log http.ErrAbortHandler, the panic
			// ReverseProxy aborts a broken stream with; it logs any other.
			if strings.Contains(logs, "http: panic serving") {
				t.Errorf("the gateway panicked: %s", logs)
			}
		})
	}
}

// hugeBody returns the size of the streamed bodies: far more than any
// buffer the gateway may hold, small enough to cross two loopback hops in
// a few seconds, under the race detector too.
func hugeBody() int64 {
	if raceEnabled() {
		return 256 << 20
	}
	return 512 << 20
}

// hugeAllocBudget bounds what the whole process (client, gateway and
// upstream) may allocate while moving one huge body.
const hugeAllocBudget = 32 << 20

// pattern is the content of the streamed bodies. Its length is prime, so
// that a lost, repeated or reordered copy buffer changes the checksum.
var pattern = func() []byte {
	p := make([]byte, 65521)
	for i := range p {
		p[i] = byte(i*131 + i>>8)
	}
	return p
}()

// patternReader yields n bytes of pattern, generated as they are read.
type patternReader struct{ off, n int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := 0; i < len(b); {
		i += copy(b[i:], pattern[(p.off+int64(i))%int64(len(pattern)):])
	}
	p.off += int64(len(b))
	return len(b), nil
}

// patternCRC is the checksum of n bytes of pattern.
func patternCRC(n int64) uint32 {
	h := crc32.NewIEEE()
	io.Copy(h, &patternReader{n: n})
	return h.Sum32()
}

// TestRealUpstreamHugeBodies streams a huge download and a huge upload
// through the gateway and checks that every byte arrives and that nothing
// held the body in memory. It does not run in parallel: it measures the
// allocations of the whole process.
func TestRealUpstreamHugeBodies(t *testing.T) {
	size := hugeBody()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "GET":
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			io.Copy(w, &patternReader{n: size})
		case "POST":
			h := crc32.NewIEEE()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d %d", n, h.Sum32())
		}
	}))
	t.Cleanup(up.Close)
	g := newLiveGW(t, up.URL)
	want := fmt.Sprintf("%d %d", size, patternCRC(size))

	tests := []struct {
		name string
		// move sends one huge body through the gateway and returns what
		// arrived: the byte count and checksum.
		move func(t *testing.T) string
	}{
		{
			name: "download with Content-Length",
			move: func(t *testing.T) string {
				resp, err := g.get(context.Background(), "/download")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				h := crc32.NewIEEE()
				n, err := io.Copy(h, resp.Body)
				if err != nil {
					t.Fatalf("downloading: %v after %d bytes", err, n)
				}
				return fmt.Sprintf("%d %d", n, h.Sum32())
			},
		},
		{
			name: "chunked upload",
			move: func(t *testing.T) string {
				r, err := http.NewRequest("POST", g.url+"/upload", &patternReader{n: size})
				if err != nil {
					t.Fatal(err)
				}
				r.Header.Set("X-App-Id", "app-1")
				resp, err := g.client.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("uploading: got %d %q (%v)", resp.StatusCode, got, err)
				}
				return string(got)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			got := tt.move(t)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if got != want {
				t.Errorf("bytes and CRC-32 that arrived: got %s, want %s", got, want)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d MiB in %v; the process allocated %.1f MiB", size>>20, elapsed.Round(time.Millisecond), float64(alloc)/(1<<20))
			if alloc > hugeAllocBudget {
				t.Errorf("allocated while streaming %d MiB: got %d bytes, want at most %d", size>>20, alloc, hugeAllocBudget)
			}
		})
	}
}

// TestRealUpstreamStreamsFlushed checks that a streamed response reaches
// the client as the upstream writes it: the upstream sends its second
// part only once the client has read the first through the gateway, so a
// gateway that buffered would never deliver the first.
func TestRealUpstreamStreamsFlushed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		contentType   string
		first, second string
	}{
		{name: "server-sent events", contentType: "text/event-stream", first: "id: 1\ndata: one\n\n", second: "id: 2\ndata: two\n\n"},
		{name: "chunked", contentType: "text/plain", first: "part one\n", second: "part two\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.first)
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("flushing upstream: %v", err)
				}
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, tt.second)
			}))
			t.Cleanup(up.Close)
			g := newLiveGW(t, up.URL)
			// If the test fails with the first part held in the gateway,
			// the upstream must finish for the servers to close.
			sendSecond := sync.OnceFunc(func() { close(next) })
			t.Cleanup(sendSecond)

			type firstPart struct {
				resp *http.Response
				body string
				err  error
			}
			first := make(chan firstPart, 1)
			go func() {
				resp, err := g.get(context.Background(), "/stream")
				if err != nil {
					first <- firstPart{err: err}
					return
				}
				b := make([]byte, len(tt.first))
				n, err := io.ReadFull(resp.Body, b)
				first <- firstPart{resp: resp, body: string(b[:n]), err: err}
			}()
			got := waitOrFail(t, first, "the first part's arrival before the second was sent")
			if got.resp != nil {
				defer got.resp.Body.Close()
			}
			if got.err != nil || got.body != tt.first {
				t.Fatalf("first part: got %q (%v), want %q", got.body, got.err, tt.first)
			}
			if ct := got.resp.Header.Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type: got %q, want %q", ct, tt.contentType)
			}
			sendSecond()
			rest, err := io.ReadAll(got.resp.Body)
			if err != nil || string(rest) != tt.second {
				t.Errorf("second part: got %q (%v), want %q", rest, err, tt.second)
			}
		})
	}
}

// TestRealUpstreamUpgradeTunnel checks that a WebSocket upgrade is counted
// by the limiter, answered 101 by the upstream through the gateway, and
// tunnels bytes both ways.
func TestRealUpstreamUpgradeTunnel(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
			http.Error(w, "want an upgrade to websocket", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijacking: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw.Reader) // echo until the client hangs up
	}))
	t.Cleanup(up.Close)
	g := newLiveGW(t, up.URL)

	// upgrade dials the gateway and asks to switch /ws to websocket.
	upgrade := func(t *testing.T) (net.Conn, *bufio.Reader, *http.Response) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gateway\r\nX-App-Id: app-1\r\n"+
			"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer to the upgrade: %v", err)
		}
		return conn, br, resp
	}

	conn, br, resp := upgrade(t)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("first upgrade: got %d Upgrade %q, want 101 websocket", resp.StatusCode, resp.Header.Get("Upgrade"))
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("first upgrade: X-RateLimit-Remaining: got %q, want 0", got)
	}
	for _, msg := range []string{"hello through the tunnel", strings.Repeat("x", 100_000)} {
		go io.WriteString(conn, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: got %d bytes %.40q (%v)", len(msg), len(got), got, err)
		}
	}
	conn.Close() // ends the tunnel, and the request
	g.obs.waitFor(t, 1)
	if o := g.obs.last(); o.Status != http.StatusSwitchingProtocols || o.API != "/ws" || o.Decision != observe.DecisionAllowed {
		t.Errorf("first upgrade's outcome: got %d %s %s, want 101 /ws allowed", o.Status, o.API, o.Decision)
	}

	_, _, resp = upgrade(t)
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("second upgrade: reading the body: %v", err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || body["error"] != "rate_limited" || body["api"] != "/ws" {
		t.Errorf("second upgrade: got %d %v, want 429 rate_limited on /ws", resp.StatusCode, body)
	}
	if got := metric(g.m, "gateway_requests_total", "app", "app-1", "api", "/ws", "decision", observe.DecisionLimited.String()); got != 1 {
		t.Errorf("requests{app-1,/ws,limited}: got %v, want 1", got)
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
