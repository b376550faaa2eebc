package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
)

const etcdWait = 30 * time.Second

// startEtcdGateway serves a gateway whose rules are the etcd key at url,
// with the demo upstream, until the test ends.
func startEtcdGateway(t *testing.T, url, cache string) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ConfigPath, cfg.RulesCache = url, cache
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DemoUpstream = true
	cfg.SourceProbeInterval = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func getStatus(t *testing.T, url, app string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-App-Id", app)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// rulesSource returns the source part of /rules and its lastError.
func rulesSource(t *testing.T, s *Server) (version string, connected bool, lastError string) {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr().String() + "/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		LastError string `json:"lastError"`
		Source    struct {
			Version   string `json:"version"`
			Connected bool   `json:"connected"`
		} `json:"source"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Source.Version, v.Source.Connected, v.LastError
}

func etcdRules(limit int, extraApp string) string {
	s := "configs:\n- appId: a\n  limits:\n  - {api: /v1, limit: " + strconv.Itoa(limit) + ", unit: 1h}\n"
	if extraApp != "" {
		s += "- appId: " + extraApp + "\n  limit: 5\n"
	}
	return s
}

// TestEtcdRules checks the gateway on rules in etcd: a write reaches it,
// counters survive the reload, an invalid value leaves the rules in force
// and shows in /rules with its line, and a lost store keeps the rules and
// shows in /readyz and /rules until it answers again.
func TestEtcdRules(t *testing.T) {
	etcd := etcdtest.Start(t)
	put := func(v string) string {
		t.Helper()
		resp, err := etcd.Client().Put(context.Background(), "/gateway/rules", v)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(resp.Header.Revision, 10)
	}
	rev := put(etcdRules(1, ""))
	s := startEtcdGateway(t, etcd.URL("/gateway/rules"), "")
	proxyURL := "http://" + s.Addr().String() + "/v1"
	if v, ok, _ := rulesSource(t, s); v != rev || !ok {
		t.Errorf("/rules source: got version %q connected %v, want %s and true", v, ok, rev)
	}
	if got := getStatus(t, proxyURL, "a"); got != 200 {
		t.Fatalf("first request: got %d, want 200", got)
	}

	// A write with the same counter for a: its count survives.
	rev = put(etcdRules(1, "b"))
	eventually.True(t, etcdWait, func() bool { v, _, _ := rulesSource(t, s); return v == rev }, "the write did not reach the gateway")
	if got := getStatus(t, proxyURL, "a"); got != 429 {
		t.Errorf("after the reload: got %d, want 429 (the counter survived)", got)
	}

	put("configs:\n- appId: a\n  limits:\n  - {api: /v1, limit: -7}\n")
	eventually.True(t, etcdWait, func() bool {
		_, _, e := rulesSource(t, s)
		return strings.Contains(e, etcd.URL("/gateway/rules")+":4: limit -7 is below -1")
	}, "/rules does not show the invalid value's error at its line")
	if v, _, _ := rulesSource(t, s); v != rev {
		t.Errorf("after an invalid value: version %s, want %s still in force", v, rev)
	}
	if got := getStatus(t, proxyURL, "a"); got != 429 {
		t.Errorf("after an invalid value: got %d, want 429 (the rules in force)", got)
	}

	etcd.Stop()
	ready := func() string {
		resp, err := http.Get("http://" + s.AdminAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strconv.Itoa(resp.StatusCode) + " " + string(b)
	}
	eventually.True(t, etcdWait, func() bool { return strings.Contains(ready(), `"connected":false`) }, "/readyz does not show the lost store")
	if r := ready(); !strings.HasPrefix(r, "200 ") {
		t.Errorf("/readyz with the store lost: got %s, want 200: the rules in force serve", r)
	}
	if got := getStatus(t, proxyURL, "a"); got != 429 {
		t.Errorf("with the store lost: got %d, want 429 (the rules in force)", got)
	}
	etcd.Restart()
	rev = put(etcdRules(3, ""))
	eventually.True(t, etcdWait, func() bool { v, ok, _ := rulesSource(t, s); return v == rev && ok }, "the gateway did not reconnect")
	if got := getStatus(t, proxyURL, "a"); got != 200 {
		t.Errorf("after the store returned with a higher limit: got %d, want 200", got)
	}
}

// TestEtcdRulesStart checks the start: an unreachable store fails it
// without a cache, and with one the gateway serves the cached rules.
func TestEtcdRulesStart(t *testing.T) {
	etcd := etcdtest.Start(t)
	if _, err := etcd.Client().Put(context.Background(), "/gateway/rules", etcdRules(1, "")); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir() + "/rules-cache"
	startEtcdGateway(t, etcd.URL("/gateway/rules"), cache) // writes the cache
	etcd.Stop()

	cfg := DefaultConfig()
	cfg.ConfigPath = etcd.URL("/gateway/rules")
	cfg.Listen, cfg.AdminListen, cfg.DemoUpstream = "127.0.0.1:0", "127.0.0.1:0", true
	cfg.Logger = slog.New(slog.DiscardHandler)
	if s, err := New(cfg); err == nil || !strings.Contains(err.Error(), "--rules-cache") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("New with etcd down and no cache: got %v, want an error naming --rules-cache", err)
	}
	s := startEtcdGateway(t, etcd.URL("/gateway/rules"), cache)
	if v, ok, _ := rulesSource(t, s); v != "cache" || ok {
		t.Errorf("/rules source: got version %q connected %v, want the cache, not connected", v, ok)
	}
	if got := getStatus(t, "http://"+s.Addr().String()+"/v1", "a"); got != 200 {
		t.Errorf("request on the cached rules: got %d, want 200", got)
	}
}
