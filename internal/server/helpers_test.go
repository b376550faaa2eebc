package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

var t0 = gwtest.T0

// testSettle is the rule file watchers' settle time in these tests, in
// place of the product's watch.DefaultSettle (2s), which every edit would
// wait: long enough for writeFile's truncate and write to land as one
// change, and the tests wait for the reload they expect rather than for a
// time. TestHalfWrittenFileNeverLoads keeps the default, which it tests.
const testSettle = 100 * time.Millisecond

// basicRules are the rules most tests use (package gwtest).
var basicRules = gwtest.BasicRules

// gw is the request path of a gateway on the memory store, on a clock of
// its own, in front of a real upstream that answers {"ok":true}.
type gw struct {
	h     *proxy.Handler
	store *limit.Memory
	clock *gwtest.Clock
	log   *slog.Logger
}

func newGW(t *testing.T, rules string) *gw {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	rp, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatalf("parsing rules: %v", err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatalf("compiling rules: %v", err)
	}
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{store: store, clock: gwtest.NewClock(t0), log: slog.New(slog.DiscardHandler)}
	g.h, err = proxy.NewHandler(proxy.HandlerConfig{Rules: rs, Store: store, Upstream: rp, Now: g.clock.Now, Logger: g.log})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// reloader returns a Reloader of g's rules from load, as the server wires
// it: the store forgets the counters of removed rules.
func (g *gw) reloader(load func() (*config.Rules, error)) *Reloader {
	return NewReloader(ReloaderConfig{Handler: g.h, Load: load, Forget: g.store.Forget, Now: g.clock.Now, Logger: g.log})
}

// do sends one request through the handler.
func (g *gw) do(method, target, app string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if app != "" {
		r.Header.Set("X-App-Id", app)
	}
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w
}
