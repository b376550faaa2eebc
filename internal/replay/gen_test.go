package replay

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// replayStart is the first instant of the generated logs: a whole minute,
// so that one-minute fixed windows start with it.
var replayStart = time.Unix(1_700_000_040, 0).UTC()

// genRequest is one request of a generated access log.
type genRequest struct {
	at     time.Time
	app    string // the app ID sent, "" for none
	ip     string
	method string
	path   string
}

// writeAccessLog writes reqs as the gateway's access log does (the real
// observe.AccessLog). Only what replay reads matters; the rest is filler.
func writeAccessLog(w io.Writer, reqs []genRequest) {
	al := observe.NewAccessLog(w, nil)
	for _, q := range reqs {
		o := &observe.Outcome{App: "*", AppID: q.app, Method: q.method, Path: q.path, Decision: observe.DecisionAllowed, Status: 200, Start: q.at}
		if q.ip != "" {
			o.ClientIP = netip.MustParseAddr(q.ip)
		}
		al.ObserveRequest(o)
	}
}

// burstPattern is the known pattern of the tests: for minutes minutes,
//   - app-2 bursts 150 POSTs to /v1/order in the first 150ms of every
//     minute (one a millisecond), then sends one a second at seconds 1..59;
//   - app-1 GETs /v1/user/{n} twice a second;
//   - three unknown callers (no app ID) each GET /anything 30 times in the
//     first 30 seconds of every minute.
func burstPattern(minutes int) []genRequest {
	var reqs []genRequest
	ips := []string{"203.0.113.1", "203.0.113.2", "2001:db8::3"}
	for m := 0; m < minutes; m++ {
		base := replayStart.Add(time.Duration(m) * time.Minute)
		for i := 0; i < 150; i++ {
			reqs = append(reqs, genRequest{at: base.Add(time.Duration(i) * time.Millisecond), app: "app-2", ip: "198.51.100.2", method: "POST", path: "/v1/order"})
		}
		for s := 0; s < 60; s++ {
			at := base.Add(time.Duration(s) * time.Second)
			if s > 0 {
				reqs = append(reqs, genRequest{at: at.Add(500 * time.Millisecond), app: "app-2", ip: "198.51.100.2", method: "POST", path: "/v1/order"})
			}
			for k := 0; k < 2; k++ {
				reqs = append(reqs, genRequest{at: at.Add(time.Duration(200+400*k) * time.Millisecond), app: "app-1", ip: "198.51.100.1", method: "GET", path: fmt.Sprintf("/v1/user/%d", s)})
			}
			if s < 30 {
				for k, ip := range ips {
					reqs = append(reqs, genRequest{at: at.Add(time.Duration(300+k) * time.Millisecond), ip: ip, method: "GET", path: "/anything"})
				}
			}
		}
	}
	sortRequests(reqs)
	return reqs
}

func sortRequests(reqs []genRequest) {
	// Stable insertion by time keeps same-instant requests in order; the
	// pattern is nearly sorted already.
	for i := 1; i < len(reqs); i++ {
		for j := i; j > 0 && reqs[j].at.Before(reqs[j-1].at); j-- {
			reqs[j], reqs[j-1] = reqs[j-1], reqs[j]
		}
	}
}

// The two rule files of the known pattern. "current" lets app-1 send 1000
// a minute, app-2 200 and unknown callers 20 each; "candidate" cuts app-1
// to 100 and app-2 to 100, and doubles the unknown callers' limit.
const (
	currentRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1000
        unit: 1m
  - appId: app-2
    limits:
      - api: /v1/order
        limit: 200
        unit: 1m
        algorithm: fixed_window
  - appId: "*"
    limits:
      - api: /
        limit: 20
        unit: 1m
        algorithm: fixed_window
`
	candidateRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 100
        unit: 1m
        algorithm: fixed_window
  - appId: app-2
    limits:
      - api: /v1/order
        limit: 100
        unit: 1m
        algorithm: fixed_window
  - appId: "*"
    limits:
      - api: /
        limit: 40
        unit: 1m
        algorithm: fixed_window
`
)

func compileRules(t testing.TB, name, rules string) *ruleset.Set {
	t.Helper()
	parsed, err := config.Parse(name, []byte(rules))
	if err != nil {
		t.Fatalf("parsing %s: %v", name, err)
	}
	rs, err := ruleset.Compile(parsed, replayStart)
	if err != nil {
		t.Fatalf("compiling %s: %v", name, err)
	}
	return rs
}

func accessLog(reqs []genRequest) []byte {
	var buf bytes.Buffer
	writeAccessLog(&buf, reqs)
	return buf.Bytes()
}

var t0 = gwtest.T0

// basicRules are the rules most tests use (package gwtest).
var basicRules = gwtest.BasicRules

// liveGateway is the request path of `gateway serve` on rules, at the
// instant its clock holds, in front of a real upstream: what replay must
// agree with. With log, it writes its access log there.
type liveGateway struct {
	h    *proxy.Handler
	now  time.Time
	last observe.Decision
}

func newLiveGateway(t *testing.T, rules string, log io.Writer, opts ...func(*proxy.HandlerConfig)) *liveGateway {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	rp, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	store, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := &liveGateway{}
	cfg := proxy.HandlerConfig{
		Rules: compileRules(t, "rules.yaml", rules), Store: store, Upstream: rp,
		Now: func() time.Time { return g.now }, Observers: []observe.Observer{g},
	}
	if log != nil {
		cfg.Observers = append(cfg.Observers, observe.NewAccessLog(log, nil))
	}
	for _, o := range opts {
		o(&cfg)
	}
	if g.h, err = proxy.NewHandler(cfg); err != nil {
		t.Fatal(err)
	}
	return g
}

// ObserveRequest keeps the decision. The test serves one request at a
// time.
func (g *liveGateway) ObserveRequest(o *observe.Outcome) { g.last = o.Decision }
