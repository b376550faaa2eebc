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
	// The only target refuses: it is never ejected on passive signals
	// (each request gets 502), and the pool stays ready.
	for i := range 10 {
		if code := g.get(t, "/api/x"); code != http.StatusBadGateway {
			t.Errorf("request %d to a refusing target: got %d, want 502", i, code)
		}
	}
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 200 {
		t.Errorf("readyz: got %d %+v, want 200: the pool keeps its only target", code, ready)
	}
	var ups upstreamsView
	adminJSON(t, g.admin, "/upstreams", &ups)
	if len(ups.Upstreams) != 1 || !ups.Upstreams[0].Ready || ups.Upstreams[0].Targets[0].State != "healthy" ||
		ups.Upstreams[0].Targets[0].Ejections != 0 || ups.Upstreams[0].Targets[0].Failures != 10 {
		t.Errorf("/upstreams: got %+v, want api with its target in, 10 failures, never ejected", ups)
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
		c.ReadyUpstreams = []string{"api"}
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
	var ready readyView
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 503 || ready.Error != "no_healthy_upstream" {
		t.Errorf("readyz: got %d %+v, want 503 no_healthy_upstream", code, ready)
	}
	healthy.Store(true)
	eventually.True(t, 30*time.Second, func() bool { return state() == "healthy" }, "the passing check never brought the target back")
	if code := g.get(t, "/api/x"); code != 200 {
		t.Errorf("back in the pool: got %d, want 200", code)
	}
}

// TestOneCallerCannotEmptyAPool fails requests on purpose, as one caller
// can: 500s through a pool of two targets that counts 5xx, and requests
// slower than their route's timeout on a pool of one (a route of its own,
// so that no other request meets that short timeout). Each pool keeps a
// target, so other callers are served and /readyz stays ready.
func TestOneCallerCannotEmptyAPool(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var served atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/err"):
			w.WriteHeader(http.StatusInternalServerError)
		case strings.HasSuffix(r.URL.Path, "/slow"):
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		served.Add(1)
	})
	var urls []string
	for range 3 {
		up := httptest.NewServer(handler)
		t.Cleanup(up.Close)
		urls = append(urls, up.URL)
	}
	t.Cleanup(func() { close(release) })
	g := startLive(t, func(c *Config) {
		c.Upstream = ""
		c.ReadyUpstreams = []string{"two", "one"}
		os.WriteFile(c.ConfigPath, []byte(fmt.Sprintf(`
upstreams:
  - name: two
    targets: [%s, %s]
    outlier: {statuses: [5xx]}
  - name: one
    targets: [%s]
routes:
  - {path: /two, upstream: two}
  - {path: /one, upstream: one}
  - {path: /one/slow, upstream: one, timeout: 200ms}
configs:
  - appId: "*"
    limit: -1
`, urls[0], urls[1], urls[2])), 0o644)
	})
	for i := range 10 {
		if code := g.get(t, "/two/err"); code != http.StatusInternalServerError {
			t.Fatalf("500 %d: got %d, want the upstream's 500", i, code)
		}
	}
	for i := range 5 {
		if code := g.get(t, "/one/slow"); code != http.StatusGatewayTimeout {
			t.Fatalf("slow request %d: got %d, want 504", i, code)
		}
	}
	for _, path := range []string{"/two/ok", "/one/ok"} {
		for i := range 10 {
			if code := g.get(t, path); code != 200 {
				t.Errorf("%s, request %d after the failures: got %d, want 200", path, i, code)
			}
		}
	}
	var ready readyView
	if code := adminJSON(t, g.admin, "/readyz", &ready); code != 200 {
		t.Errorf("readyz: got %d %+v, want 200", code, ready)
	}
	var ups upstreamsView
	adminJSON(t, g.admin, "/upstreams", &ups)
	out := map[string]int{}
	for _, p := range ups.Upstreams {
		for _, tg := range p.Targets {
			if tg.State != "healthy" {
				out[p.Name]++
			}
		}
	}
	if out["two"] > 1 || out["one"] != 0 {
		t.Errorf("targets out: got %v, want at most 1 of two's 2 and none of one's 1; /upstreams %+v", out, ups)
	}
}
