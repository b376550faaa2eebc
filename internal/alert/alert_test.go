package alert_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/alert"
	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// t0 is the tests' clock: an hour's window starts at 10:00.
var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// receiver is a webhook that records the alerts it gets, checking their
// signature.
type receiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	got    []alert.Alert
	srv    *httptest.Server
}

func newReceiver(t *testing.T, secret string) *receiver {
	rc := &receiver{t: t, secret: []byte(secret)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !alert.Verify(rc.secret, body, r.Header.Get(alert.SignatureHeader)) {
			t.Errorf("an alert whose signature %q does not verify: %s", r.Header.Get(alert.SignatureHeader), body)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var a alert.Alert
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("an alert that is not JSON: %s", body)
		}
		rc.mu.Lock()
		rc.got = append(rc.got, a)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) alerts() []alert.Alert {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]alert.Alert(nil), rc.got...)
}

const alertRules = `
plans:
  - name: metered
    alerts: [80, 100]
    limits:
      - {api: /v1/chat, limit: 10, unit: 1h, algorithm: fixed_window, by: "header:X-User"}
configs:
  - appId: app-1
    plan: metered
    limits:
      - {api: /v1/tokens, limit: 100, unit: 1h, algorithm: fixed_window, cost: {header: X-Cost}, alerts: ["50%"]}
`

// gateway is one in-process gateway of the fleet: a proxy handler whose
// observer is a Notifier.
type gateway struct {
	h http.Handler
	n *alert.Notifier
}

func newGateway(t *testing.T, store limit.Store, once alert.Once, webhook string, queue int, clock *gwtest.Clock) *gateway {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(alertRules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Cost", r.URL.Query().Get("cost"))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	rp, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	n, err := alert.New(alert.Config{URL: webhook, Secret: []byte("s3cret"), Queue: queue, Once: once, Now: clock.Now,
		Attempts: 3, Backoff: time.Hour, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	h, err := proxy.NewHandler(proxy.HandlerConfig{Rules: rs, Store: store, Upstream: rp, Now: clock.Now, Observers: []observe.Observer{n}})
	if err != nil {
		t.Fatal(err)
	}
	return &gateway{h: h, n: n}
}

func (g *gateway) do(t *testing.T, target, user string) int {
	t.Helper()
	r := httptest.NewRequest("POST", target, nil)
	r.Header.Set("X-App-Id", "app-1")
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w.Code
}

// TestAlertsOncePerFleet: three gateways on one Redis, two callers each
// spending their budget across all three; the webhook gets 80 % and
// 100 % once per caller, signed, whatever gateway saw them.
func TestAlertsOncePerFleet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: needs redis-server")
	}
	srv := redistest.Start(t)
	rc := newReceiver(t, "s3cret")
	clock := gwtest.NewClock(t0)
	var fleet []*gateway
	for range 3 {
		st, err := redisstore.New(redisstoretest.WithDecisionClock(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second, DenyCacheSize: -1}, clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fleet = append(fleet, newGateway(t, st, st, rc.srv.URL, 100, clock))
	}
	users := []string{"alice", "bob"}
	refused := map[string]int{}
	// 14 requests each, round robin over the gateways: 10 admitted, 4
	// refused.
	for i := range 14 {
		for _, u := range users {
			if code := fleet[i%3].do(t, "/v1/chat", u); code == http.StatusTooManyRequests {
				refused[u]++
			}
		}
	}
	for _, u := range users {
		if refused[u] != 4 {
			t.Fatalf("%s: %d refused, want 4", u, refused[u])
		}
	}
	eventually.True(t, time.Minute, func() bool { return len(rc.alerts()) >= 4 }, "the webhook got %d alerts, want 4", len(rc.alerts()))
	for _, g := range fleet {
		g.n.Close() // its workers are done: nothing more can come
	}
	got := map[string]int{}
	for _, a := range rc.alerts() {
		got[fmt.Sprintf("%s %d", a.Key, a.Threshold)]++
		if a.App != "app-1" || a.API != "/v1/chat" || a.Plan != "metered" || a.Limit != 10 || a.Unit != "1h0m0s" ||
			!a.WindowStart.Equal(t0) || !a.WindowEnd.Equal(t0.Add(time.Hour)) {
			t.Errorf("alert %+v: want app-1 /v1/chat on plan metered, limit 10 per 1h0m0s, in the window from %v", a, t0)
		}
		if a.Used*100 < int64(a.Threshold)*a.Limit {
			t.Errorf("alert %+v: used %d is below its threshold", a, a.Used)
		}
	}
	for _, u := range users {
		for _, th := range []int{80, 100} {
			if n := got[fmt.Sprintf("%s %d", u, th)]; n != 1 {
				t.Errorf("%s crossed %d%%: told %d times, want once (%v)", u, th, n, got)
			}
		}
	}
	if len(got) != 4 {
		t.Errorf("alerts: got %v, want alice and bob at 80 and 100", got)
	}
	var fired int64
	for _, g := range fleet {
		fired += g.n.Stats().Fired
	}
	if fired != 4 {
		t.Errorf("fired across the fleet: got %d, want 4", fired)
	}
}

// TestAlertsNextWindow: a threshold fires again in the next window, and
// a cost charged when the response arrives counts toward it.
func TestAlertsNextWindow(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, "s3cret")
	clock := gwtest.NewClock(t0)
	mem, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, mem, nil, rc.srv.URL, 100, clock)
	// 30 + 30 units of 100: 60 % crosses 50 % once.
	for range 2 {
		if code := g.do(t, "/v1/tokens?cost=30", "x"); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	g.do(t, "/v1/tokens?cost=1", "x") // 61 %: already told
	eventually.True(t, time.Minute, func() bool { return len(rc.alerts()) >= 1 }, "no alert at 60%%")
	clock.Set(t0.Add(time.Hour))
	g.do(t, "/v1/tokens?cost=20", "x") // 20 % of the new window
	g.do(t, "/v1/tokens?cost=40", "x") // 60 %
	eventually.True(t, time.Minute, func() bool { return len(rc.alerts()) >= 2 }, "no alert in the second window")
	g.n.Close()
	as := rc.alerts()
	if len(as) != 2 {
		t.Fatalf("alerts: got %d, want 2: %+v", len(as), as)
	}
	for i, a := range as {
		if want := t0.Add(time.Duration(i) * time.Hour); a.Threshold != 50 || a.API != "/v1/tokens" || a.Used != 60 || !a.WindowStart.Equal(want) {
			t.Errorf("alert %d: got %+v, want 50%% of /v1/tokens at 60 used, window from %v", i, a, want)
		}
	}
}

// TestAlertsReceiverDown: a webhook that hangs or refuses never holds a
// request: the alerts beyond the queue are dropped and counted, and
// every request is answered.
func TestAlertsReceiverDown(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(hang) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := "http://" + l.Addr().String()
	l.Close() // nothing listens: every call is refused
	for _, tc := range []struct{ name, url string }{{"hanging", hanging.URL}, {"refusing", refusing}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := gwtest.NewClock(t0)
			mem, err := limit.NewMemory(limit.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			g := newGateway(t, mem, nil, tc.url, 2, clock)
			const callers = 30
			for i := range callers {
				for range 8 { // 80 % of 10
					if code := g.do(t, "/v1/chat", fmt.Sprint("user-", i)); code != 200 {
						t.Fatalf("caller %d: status %d", i, code)
					}
				}
			}
			eventually.True(t, time.Minute, func() bool { return g.n.Stats().Fired == callers },
				"fired %d alerts, want %d", g.n.Stats().Fired, callers)
			eventually.True(t, time.Minute, func() bool { s := g.n.Stats(); return s.Queued+s.Dropped == callers },
				"queued and dropped: %+v, want %d in all", g.n.Stats(), callers)
			s := g.n.Stats()
			// The sender holds one alert (hanging, or waiting an hour
			// to retry), the queue two more at most.
			if s.Queued > 3 || s.Dropped < callers-3 || s.Sent != 0 {
				t.Errorf("stats %+v: want at most 3 queued, the rest dropped, none sent", s)
			}
		})
	}
}

func TestSignVerify(t *testing.T) {
	t.Parallel()
	// The example of docs/plans-and-tokens.md, "Budget alerts":
	// printf '%s' BODY | openssl dgst -sha256 -hmac s3cret
	body := []byte(`{"type":"budget_alert","app":"app-1","threshold":80}`)
	sig := alert.Sign([]byte("s3cret"), body)
	if want := "sha256=4b84faae042ac8d885f5b8967cb808e839d884e0ab6535c2bf1eb04757f6bb6b"; sig != want {
		t.Errorf("Sign: got %q, want %q", sig, want)
	}
	if !alert.Verify([]byte("s3cret"), body, sig) {
		t.Error("Verify refuses Sign's signature")
	}
	if alert.Verify([]byte("other"), body, sig) || alert.Verify([]byte("s3cret"), append(body, ' '), sig) {
		t.Error("Verify accepts a signature of another secret or body")
	}
}
