package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

// adminJSON gets path on the admin port and decodes its JSON into v,
// returning the status.
func adminJSON(t *testing.T, admin, path string, v any) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v in %s", path, err, b)
	}
	return resp.StatusCode
}

func routeRules(targets ...string) string {
	return fmt.Sprintf(`
upstreams:
  - name: api
    targets: [%s]
routes:
  - path: /api
    upstream: api
configs:
  - appId: "*"
    limit: -1
`, strings.Join(targets, ", "))
}

func TestUpstreamsEndpointReadyzAndRefusedReload(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "api") }))
	t.Cleanup(up.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	var path string
	g := startLive(t, func(c *Config) {
		path = c.ConfigPath
		c.Upstream = "" // routes only
		c.ReadyUpstreams = []string{"api"}
		if err := os.WriteFile(path, []byte(routeRules(dead)), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	var ready readyView
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 200 {
		t.Fatalf("readyz with a fresh pool: got %d %+v, want 200", code, ready)
	}
	// The only target refuses: ejected after a few requests, and /readyz
	// then says so.
	for range 5 {
		g.get(t, "/api/x")
	}
	if code := g.get(t, "/api/x"); code != http.StatusServiceUnavailable {
		t.Errorf("with no healthy target: got %d, want 503", code)
	}
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 503 || ready.Error != "no_healthy_upstream" {
		t.Errorf("readyz: got %d %+v, want 503 no_healthy_upstream", code, ready)
	}
	var ups upstreamsView
	adminJSON(t, g.admin, "/upstreams", &ups)
	if len(ups.Upstreams) != 1 || ups.Upstreams[0].Ready || ups.Upstreams[0].Targets[0].State != "ejected" || ups.Upstreams[0].Targets[0].Ejections != 1 {
		t.Errorf("/upstreams: got %+v, want api with its target ejected once", ups)
	}
	if code := g.get(t, "/other"); code != 404 {
		t.Errorf("no route: got %d, want 404", code)
	}

	// A reload with a bad target is refused; the rules in force stay.
	if err := os.WriteFile(path, []byte(routeRules("ftp://nope")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := g.srv.rules.Reload(); err == nil || !strings.Contains(err.Error(), "rules.yaml:4: target") {
		t.Errorf("reload with a bad target: got %v, want a file:line error", err)
	}
	// A good one brings a live target in.
	if err := os.WriteFile(path, []byte(routeRules(up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := g.srv.rules.Reload(); err != nil {
		t.Fatal(err)
	}
	if code := g.get(t, "/api/x"); code != 200 {
		t.Errorf("after the reload: got %d, want 200", code)
	}
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 200 {
		t.Errorf("readyz after the reload: got %d %+v, want 200", code, ready)
	}
	var rules rulesView
	adminJSON(t, g.admin, "/rules", &rules)
	if len(rules.Routes) != 1 || rules.Routes[0].Upstream != "api" || rules.Routes[0].Path != "/api" {
		t.Errorf("/rules routes: got %+v", rules.Routes)
	}
}

func TestNoUpstreamNeedsRoutes(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.ConfigPath = filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(cfg.ConfigPath, []byte(runRules), 0o644)
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	s, err := New(cfg)
	if err == nil {
		s.Close()
		t.Fatal("New without --upstream nor routes: got nil, want an error")
	}
	if !strings.Contains(err.Error(), "no upstream") {
		t.Errorf("got %v, want it to say there is no upstream", err)
	}
}

// TestActiveHealthChecksRun checks that Serve runs the health checks:
// a target failing its check leaves the pool, and comes back.
func TestActiveHealthChecksRun(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	g := startLive(t, func(c *Config) {
		os.WriteFile(c.ConfigPath, []byte(fmt.Sprintf(`
upstreams:
  - name: api
    targets: [%s]
    healthCheck: {path: /healthz, interval: 200ms, timeout: 200ms, healthy: 1, unhealthy: 3}
routes:
  - path: /api
    upstream: api
configs:
  - appId: "*"
    limit: -1
`, up.URL)), 0o644)
	})
	state := func() string {
		var ups upstreamsView
		adminJSON(t, g.admin, "/upstreams", &ups)
		return ups.Upstreams[0].Targets[0].State
	}
	eventually.True(t, 30*time.Second, func() bool { return state() == "unhealthy" }, "the failing check never took the target out")
	if code := g.get(t, "/api/x"); code != http.StatusServiceUnavailable {
		t.Errorf("with the only target unhealthy: got %d, want 503", code)
	}
	healthy.Store(true)
	eventually.True(t, 30*time.Second, func() bool { return state() == "healthy" }, "the passing check never brought the target back")
	if code := g.get(t, "/api/x"); code != 200 {
		t.Errorf("back in the pool: got %d, want 200", code)
	}
}
