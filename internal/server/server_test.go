package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRules admit app-1 on /v1/user far more often than any test asks.
const runRules = `configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1000000
        unit: 60
`

// live is a gateway served by Serve on loopback ports, as `gateway serve`
// starts it.
type live struct {
	srv          *Server
	proxy, admin string // host:port
	logs         *logStore
}

// startLive serves a gateway of DefaultConfig, edited by edit if not nil,
// filling in loopback listeners, a rule file
// (runRules), an httptest upstream that answers "ok" and a logger that
// records every record, and waits until it listens. The gateway stops
// when the test ends.
func startLive(t *testing.T, edit func(*Config)) *live {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	cfg := DefaultConfig()
	cfg.Upstream = up.URL
	cfg.ConfigPath = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(cfg.ConfigPath, []byte(runRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.WatchSettle = testSettle
	logs := newLogStore()
	cfg.Logger = slog.New(&logRecorder{store: logs})
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Serve did not return 30s after its context was cancelled")
		}
	})
	return &live{srv: s, proxy: s.Addr().String(), admin: s.AdminAddr().String(), logs: logs}
}

// get sends a GET for path as app-1 through the gateway and returns the
// status.
func (g *live) get(t *testing.T, path string) int {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+g.proxy+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-App-Id", "app-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// logRecord is one log record, its attributes as strings.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logStore keeps the records of a logger and lets tests wait for one.
type logStore struct {
	mu      sync.Mutex
	records []logRecord
	more    chan struct{} // closed and replaced at each record
}

func newLogStore() *logStore { return &logStore{more: make(chan struct{})} }

func (s *logStore) add(r logRecord) {
	s.mu.Lock()
	s.records = append(s.records, r)
	close(s.more)
	s.more = make(chan struct{})
	s.mu.Unlock()
}

// mark returns the position of the next record, for waitFor.
func (s *logStore) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// waitFor returns the first record from position from on whose message is
// msg and whose attributes include attrs (key, value pairs), waiting up to
// 10s for it.
func (s *logStore) waitFor(t *testing.T, from int, msg string, attrs ...string) logRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		for ; from < len(s.records); from++ {
			if r := s.records[from]; r.msg == msg && r.has(attrs...) {
				s.mu.Unlock()
				return r
			}
		}
		more := s.more
		s.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("no log record %q %v within 10s; logged:\n%s", msg, attrs, s)
		}
	}
}

func (r logRecord) has(attrs ...string) bool {
	for i := 0; i+1 < len(attrs); i += 2 {
		if r.attrs[attrs[i]] != attrs[i+1] {
			return false
		}
	}
	return true
}

func (s *logStore) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, r := range s.records {
		b.WriteString(r.level.String() + " " + r.msg)
		for k, v := range r.attrs {
			b.WriteString(" " + k + "=" + v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// logRecorder is a slog.Handler that keeps every record, debug included,
// in a logStore. Groups are flattened away.
type logRecorder struct {
	store *logStore
	attrs []slog.Attr
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: make(map[string]string)}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.store.add(rec)
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{store: h.store, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// TestSlowlorisIsCutOff holds hundreds of connections that send part of a
// request's headers and then stall, the slowloris attack: real clients must
// still be served meanwhile, and the server must close the stalled
// connections once --read-header-timeout has passed.
func TestSlowlorisIsCutOff(t *testing.T) {
	t.Parallel()
	g := startLive(t, func(c *Config) { c.ReadHeaderTimeout = 500 * time.Millisecond })

	const stalled = 300
	conns := make([]net.Conn, 0, stalled)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < stalled; i++ {
		c, err := net.DialTimeout("tcp", g.proxy, 10*time.Second)
		if err != nil {
			t.Fatalf("stalled connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /v1/user HTTP/1.1\r\nHost: gateway.test\r\nX-App-Id: app-1\r\nX-Slow: "); err != nil {
			t.Fatalf("stalled connection %d: %v", i, err)
		}
	}

	// Real clients, each on a new connection, are served meanwhile.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < 20; i++ {
		req, _ := http.NewRequest("GET", "http://"+g.proxy+"/v1/user", nil)
		req.Header.Set("X-App-Id", "app-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("real client %d while %d connections stall: %v", i, stalled, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Errorf("real client %d while %d connections stall: got %d %q, want 200 \"ok\"", i, stalled, resp.StatusCode, body)
		}
	}
	// How many stalled connections outlived the real clients: a read
	// with a deadline already past tells an open connection (timeout)
	// from a closed one without waiting. Informational: how long the
	// test took to get here is up to the machine.
	open := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now())
		var b [1]byte
		if _, err := c.Read(b[:]); isTimeout(err) {
			open++
		}
	}
	t.Logf("%d of %d stalled connections were still open when the real clients were done", open, stalled)

	// The server closes every stalled connection: a read ends (EOF or
	// reset), or reads a 408. The deadline is generous, yet below the
	// 10s default, so that a --read-header-timeout that did not reach
	// the server fails the test.
	deadline := time.Now().Add(8 * time.Second)
	for i, c := range conns {
		c.SetReadDeadline(deadline)
		got, err := io.ReadAll(c)
		switch {
		case isTimeout(err):
			t.Fatalf("stalled connection %d still open 8s on; want it closed after the 500ms --read-header-timeout", i)
		case len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 408 "):
			t.Errorf("stalled connection %d: got %q, want nothing or a 408", i, got)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestIdleConnectionsAreClosed checks that --idle-timeout reaches the
// server: a keep-alive connection that sends nothing after its response is
// closed.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	g := startLive(t, func(c *Config) { c.IdleTimeout = 500 * time.Millisecond })
	c, err := net.DialTimeout("tcp", g.proxy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/user HTTP/1.1\r\nHost: gateway.test\r\nX-App-Id: app-1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// A generous deadline, yet far below the 120s default.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if isTimeout(err) {
		t.Fatalf("idle connection still open 30s on; want it closed after the 500ms --idle-timeout")
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 200 ") || !strings.HasSuffix(string(got), "\r\n\r\nok") {
		t.Errorf("got %q, want one 200 response with body \"ok\" before the close", got)
	}
}

// TestMaxHeaderBytes checks that a request whose headers are larger than
// --max-header-bytes gets 431, and one within it is served. net/http lets
// 4096 bytes more through than the limit, so the sizes stay clear of it.
func TestMaxHeaderBytes(t *testing.T) {
	t.Parallel()
	small := startLive(t, func(c *Config) { c.MaxHeaderBytes = 4096 })
	byDefault := startLive(t, nil)
	tests := []struct {
		name   string
		g      *live
		header int // bytes of one header's value
		want   int
	}{
		{name: "2KiB under a 4KiB limit", g: small, header: 2 << 10, want: 200},
		{name: "16KiB over a 4KiB limit", g: small, header: 16 << 10, want: http.StatusRequestHeaderFieldsTooLarge},
		{name: "32KiB under the 64KiB default", g: byDefault, header: 32 << 10, want: 200},
		{name: "80KiB over the 64KiB default", g: byDefault, header: 80 << 10, want: http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest("GET", "http://"+tt.g.proxy+"/v1/user", nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("X-App-Id", "app-1")
			r.Header.Set("X-Big", strings.Repeat("a", tt.header))
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// TestRunRejectsBadServerFlags checks the errors of the server flags, all
// found before anything listens.
func TestRunRejectsBadServerFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	emptyToken := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(emptyToken, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []newRefusal{
		{name: "negative read header timeout", edit: func(c *Config) { c.ReadHeaderTimeout = -time.Second }, want: "--read-header-timeout -1s is not positive"},
		{name: "negative idle timeout", edit: func(c *Config) { c.IdleTimeout = -time.Second }, want: "--idle-timeout -1s is not positive"},
		{name: "negative max header bytes", edit: func(c *Config) { c.MaxHeaderBytes = -1 }, want: "--max-header-bytes -1 is not positive"},
		{name: "cert without key", edit: func(c *Config) { c.TLSCert = notPEM }, want: "--tls-cert and --tls-key go together"},
		{name: "key without cert", edit: func(c *Config) { c.TLSKey = notPEM }, want: "--tls-cert and --tls-key go together"},
		{name: "missing cert", edit: func(c *Config) { c.TLSCert, c.TLSKey = filepath.Join(dir, "nope.pem"), notPEM }, want: "loading --tls-cert " + filepath.Join(dir, "nope.pem")},
		{name: "bad PEM", edit: func(c *Config) { c.TLSCert, c.TLSKey = notPEM, notPEM }, want: "loading --tls-cert " + notPEM},
		{name: "token and token file", edit: func(c *Config) { c.AdminToken, c.AdminTokenFile = "a", emptyToken }, want: "--admin-token and --admin-token-file are exclusive"},
		{name: "empty token file", edit: func(c *Config) { c.AdminTokenFile = emptyToken }, want: "--admin-token-file " + emptyToken + " is empty"},
		{name: "missing token file", edit: func(c *Config) { c.AdminTokenFile = filepath.Join(dir, "nope") }, want: "--admin-token-file: open "},
	}
	checkNewRefuses(t, dir, tests)
}

// newRefusal is a Config edit that New must refuse with an error
// containing want.
type newRefusal struct {
	name string
	edit func(*Config)
	want string
}

// checkNewRefuses runs New on DefaultConfig with each edit, with a rule
// file in dir that does not exist, and checks that it fails as wanted
// before anything serves.
func checkNewRefuses(t *testing.T, dir string, tests []newRefusal) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Upstream = "http://127.0.0.1:1"
			cfg.ConfigPath = filepath.Join(dir, "no-rules.yaml")
			cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
			cfg.Logger = slog.New(slog.DiscardHandler)
			tt.edit(&cfg)
			s, err := New(cfg)
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestValidateRefusesZero checks that zero, which net/http would take
// for "no limit", is refused as given.
func TestValidateRefusesZero(t *testing.T) {
	t.Parallel()
	good := DefaultConfig()
	good.Upstream = "http://127.0.0.1:1"
	if err := good.Validate(); err != nil {
		t.Fatalf("the defaults: got %v, want nil", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{name: "read header timeout", edit: func(c *Config) { c.ReadHeaderTimeout = 0 }, want: "--read-header-timeout 0s is not positive"},
		{name: "idle timeout", edit: func(c *Config) { c.IdleTimeout = 0 }, want: "--idle-timeout 0s is not positive"},
		{name: "max header bytes", edit: func(c *Config) { c.MaxHeaderBytes = 0 }, want: "--max-header-bytes 0 is not positive"},
		{name: "relative upstream", edit: func(c *Config) { c.Upstream = "127.0.0.1:1" }, want: "--upstream"},
		{name: "demo and upstream", edit: func(c *Config) { c.DemoUpstream = true }, want: "--demo-upstream and --upstream are exclusive"},
		{name: "limit status", edit: func(c *Config) { c.LimitStatus = 200 }, want: "--limit-status 200 is not a 4xx or 5xx status"},
		{name: "local share", edit: func(c *Config) { c.LocalShare = 1.5 }, want: "--local-share 1.5 is outside (0, 1]"},
		{name: "redis max keys", edit: func(c *Config) { c.RedisMaxKeys = 0 }, want: "--redis-max-keys 0 is not positive (-1 for no budget)"},
		{name: "redis max keys below -1", edit: func(c *Config) { c.RedisMaxKeys = -2 }, want: "--redis-max-keys -2 is not positive (-1 for no budget)"},
		{name: "trusted proxies", edit: func(c *Config) { c.TrustedProxies = []string{"nope"} }, want: "--trusted-proxies"},
		{name: "h2c with tls", edit: func(c *Config) { c.H2C, c.TLSCert, c.TLSKey = true, "c.pem", "k.pem" }, want: "--h2c serves HTTP/2 without TLS"},
		{name: "body memory below one body", edit: func(c *Config) { c.MaxBodyMemory = 100 }, want: "--max-body-memory 100: set the bytes"},
		{name: "body memory below two bodies", edit: func(c *Config) { c.MaxBodyMemory = 65536 }, want: "at least 262144"},
		{name: "body memory below -1", edit: func(c *Config) { c.MaxBodyMemory = -5 }, want: "--max-body-memory -5: set the bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
