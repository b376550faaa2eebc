package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
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
)

// clock is a settable clock for the pools.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// counting is an upstream that counts the requests it gets and answers
// with status (200 unless set).
type counting struct {
	*httptest.Server
	n      atomic.Int64
	status atomic.Int64
	// bodies are the request bodies it read, concatenated.
	mu     sync.Mutex
	bodies []string
}

func newCounting(t *testing.T) *counting {
	t.Helper()
	c := &counting{}
	c.status.Store(200)
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(int(c.status.Load()))
			return
		}
		c.n.Add(1)
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.bodies = append(c.bodies, string(b))
		c.mu.Unlock()
		w.WriteHeader(int(c.status.Load()))
		io.WriteString(w, "ok")
	}))
	t.Cleanup(c.Close)
	return c
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// build returns the committed pool "p" of targets (URL, weight).
func build(t *testing.T, reg *Registry, balancing string, hc *config.HealthCheck, targets ...string) *Pool {
	t.Helper()
	return buildOutlier(t, reg, balancing, hc, nil, targets...)
}

// buildOutlier is build with the outlier section o.
func buildOutlier(t *testing.T, reg *Registry, balancing string, hc *config.HealthCheck, o *config.Outlier, targets ...string) *Pool {
	t.Helper()
	u := config.Upstream{Name: "p", Balancing: balancing, HealthCheck: hc, Outlier: o}
	for _, s := range targets {
		u.Targets = append(u.Targets, config.Target{URL: mustURL(t, s), Weight: 1})
	}
	set, err := reg.Build([]config.Upstream{u})
	if err != nil {
		t.Fatal(err)
	}
	reg.Commit(set)
	return set.Pool("p")
}

func newRegistry(t *testing.T, c *clock) *Registry {
	t.Helper()
	cfg := Config{ResponseHeaderTimeout: time.Minute}
	if c != nil {
		cfg.Now = c.Now
	}
	reg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// get sends a GET through p and returns the status, or the error.
func get(t *testing.T, p http.RoundTripper, base *url.URL) (int, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base.String()+"/x", nil)
	resp, err := p.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func within(t *testing.T, what string, got, want int64) {
	t.Helper()
	if d := float64(got-want) / float64(want); d > 0.2 || d < -0.2 {
		t.Errorf("%s: got %d requests, want %d ± 20%%", what, got, want)
	}
}

func TestLeastRequestSpreadsEvenly(t *testing.T) {
	t.Parallel()
	ups := []*counting{newCounting(t), newCounting(t), newCounting(t)}
	p := build(t, newRegistry(t, nil), config.BalanceLeastRequest, nil, ups[0].URL, ups[1].URL, ups[2].URL)
	const n = 1500
	for range n {
		if code, err := get(t, p, p.Base()); err != nil || code != 200 {
			t.Fatalf("got %d, %v; want 200", code, err)
		}
	}
	for i, u := range ups {
		within(t, "target "+string(rune('a'+i)), u.n.Load(), n/3)
	}
}

func TestLeastRequestAvoidsTheBusyTarget(t *testing.T) {
	t.Parallel()
	// One target holds requests until released: the other must take
	// every request that comes meanwhile, because two random choices
	// among two targets always compare both.
	release := make(chan struct{})
	held := make(chan struct{}, 10)
	var slowN atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowN.Add(1)
		held <- struct{}{}
		<-release
	}))
	t.Cleanup(slow.Close)
	fast := newCounting(t)
	p := build(t, newRegistry(t, nil), "", nil, slow.URL, fast.URL)
	// Send requests one at a time until one is held by the slow target.
	var wg sync.WaitGroup
	for slowN.Load() == 0 {
		wg.Add(1)
		done := make(chan struct{})
		go func() {
			defer wg.Done()
			defer close(done)
			get(t, p, p.Base())
		}()
		select {
		case <-held:
		case <-done:
		}
	}
	before := fast.n.Load()
	for range 100 {
		if code, err := get(t, p, p.Base()); err != nil || code != 200 {
			t.Fatalf("got %d, %v; want 200 from the idle target", code, err)
		}
	}
	if got := fast.n.Load() - before; got != 100 {
		t.Errorf("the idle target got %d of 100 requests while the other was busy, want all", got)
	}
	close(release)
	wg.Wait()
}

func TestWeights(t *testing.T) {
	t.Parallel()
	for _, balancing := range []string{config.BalanceLeastRequest, config.BalanceRoundRobin} {
		t.Run(balancing, func(t *testing.T) {
			t.Parallel()
			a, b := newCounting(t), newCounting(t)
			reg := newRegistry(t, nil)
			set, err := reg.Build([]config.Upstream{{Name: "p", Balancing: balancing, Targets: []config.Target{
				{URL: mustURL(t, a.URL), Weight: 1}, {URL: mustURL(t, b.URL), Weight: 3},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			p := set.Pool("p")
			for range 2000 {
				if _, err := get(t, p, p.Base()); err != nil {
					t.Fatal(err)
				}
			}
			within(t, "weight 1", a.n.Load(), 500)
			within(t, "weight 3", b.n.Load(), 1500)
		})
	}
}

func TestRoundRobinOrder(t *testing.T) {
	t.Parallel()
	// Smooth weighted round-robin, as nginx: weights 5, 1, 1 give
	// a a b a c a a.
	reg := newRegistry(t, nil)
	set, err := reg.Build([]config.Upstream{{Name: "p", Balancing: config.BalanceRoundRobin, Targets: []config.Target{
		{URL: mustURL(t, "http://a"), Weight: 5}, {URL: mustURL(t, "http://b"), Weight: 1}, {URL: mustURL(t, "http://c"), Weight: 1},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Pool("p")
	var got string
	for range 14 {
		got += p.pick(inPool{}, nil).url.Host
	}
	if want := "aabacaaaabacaa"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestRetryWhenNothingReachedTheTarget(t *testing.T) {
	t.Parallel()
	live := newCounting(t)
	c := newClock()
	reg := newRegistry(t, c)
	p := build(t, reg, "", nil, deadURL(t), live.URL)
	const n = 50
	for i := range n {
		body := strings.Repeat("b", i+1)
		req, _ := http.NewRequest(http.MethodPost, p.Base().String()+"/x", strings.NewReader(body))
		resp, err := p.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v; want it retried on the live target", i, err)
		}
		resp.Body.Close()
	}
	if got := live.n.Load(); got != n {
		t.Errorf("the live target got %d requests, want %d", got, n)
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	for i, b := range live.bodies {
		if len(b) != i+1 {
			t.Errorf("request %d reached the live target with a body of %d bytes, want %d", i, len(b), i+1)
		}
	}
	// The dead target was ejected after DefaultFailures refusals.
	dead := p.Targets()[0].State(c.Now())
	if dead.State != "ejected" || dead.Ejections != 1 {
		t.Errorf("dead target: got %+v, want ejected once", dead)
	}
}

// cutter is an upstream that reads a request and closes the connection
// without answering: the request reached it.
func newCutter(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s, &n
}

func TestNoRetryOnceTheRequestReachedATarget(t *testing.T) {
	t.Parallel()
	a, an := newCutter(t)
	b, bn := newCutter(t)
	p := build(t, newRegistry(t, nil), "", nil, a.URL, b.URL)
	tests := []struct {
		name, method string
		body         io.Reader
	}{
		{name: "GET", method: http.MethodGet},
		{name: "POST", method: http.MethodPost, body: strings.NewReader("payload")},
	}
	sent := int64(0)
	for _, tt := range tests {
		for range 3 {
			req, _ := http.NewRequest(tt.method, p.Base().String()+"/x", tt.body)
			if tt.body != nil {
				req.Body = io.NopCloser(strings.NewReader("payload"))
				req.GetBody = nil
			}
			// As proxy's sendOnce leaves a GET: a body that cannot be
			// rewound, so net/http does not resend it either.
			if tt.body == nil {
				req.Body = io.NopCloser(strings.NewReader(""))
				req.ContentLength = 0
				req.TransferEncoding = []string{"identity"}
			}
			resp, err := p.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s: got %d, want an error: the upstream closed the connection", tt.name, resp.StatusCode)
			}
			sent++
			if got := an.Load() + bn.Load(); got != sent {
				t.Fatalf("%s: the upstreams got %d requests for %d sent, want one each", tt.name, got, sent)
			}
		}
	}
}

// outlier5xx is the default outlier section with 5xx responses counted
// as failures.
func outlier5xx() *config.Outlier {
	return &config.Outlier{Failures: DefaultFailures, Ejection: DefaultBaseEjection, MaxEjection: DefaultMaxEjection,
		MaxEjectionPercent: config.DefaultMaxEjectionPercent, PanicThreshold: config.DefaultPanicThreshold,
		Statuses: []config.StatusRange{{Lo: 500, Hi: 599}}}
}

func TestEjectionGrowsAndRecovers(t *testing.T) {
	t.Parallel()
	bad, good := newCounting(t), newCounting(t)
	bad.status.Store(502)
	c := newClock()
	reg := newRegistry(t, c)
	p := buildOutlier(t, reg, config.BalanceRoundRobin, nil, outlier5xx(), bad.URL, good.URL)
	badT := p.Targets()[0]
	// Round-robin alternates: the bad target fails every other request.
	for bad.n.Load() < DefaultFailures {
		get(t, p, p.Base())
	}
	st := badT.State(c.Now())
	if st.State != "ejected" || st.EjectedUntil == nil || !st.EjectedUntil.Equal(c.Now().Add(DefaultBaseEjection)) {
		t.Fatalf("after %d 5xx in a row: got %+v, want ejected for %s", DefaultFailures, st, DefaultBaseEjection)
	}
	steps := []struct {
		name      string
		advance   time.Duration
		badStatus int64
		wantBad   int64 // requests the bad target gets of 10
		wantState string
	}{
		{name: "ejected: all to the good target", advance: DefaultBaseEjection - time.Millisecond, badStatus: 502, wantBad: 0, wantState: "ejected"},
		// Back after the ejection; still failing: ejected again, twice as
		// long, after DefaultFailures more.
		{name: "back, fails again", advance: time.Millisecond, badStatus: 502, wantBad: DefaultFailures, wantState: "ejected"},
		{name: "second ejection lasts twice as long", advance: 2*DefaultBaseEjection - time.Millisecond, badStatus: 200, wantBad: 0, wantState: "ejected"},
		{name: "recovered", advance: time.Millisecond, badStatus: 200, wantBad: 5, wantState: "healthy"},
	}
	for _, s := range steps {
		c.Add(s.advance)
		bad.status.Store(s.badStatus)
		before := bad.n.Load()
		for range 10 {
			get(t, p, p.Base())
		}
		if got := bad.n.Load() - before; got != s.wantBad {
			t.Errorf("%s: the bad target got %d of 10 requests, want %d", s.name, got, s.wantBad)
		}
		if got := badT.State(c.Now()).State; got != s.wantState {
			t.Errorf("%s: state %s, want %s", s.name, got, s.wantState)
		}
	}
}

func TestNoHealthyTarget(t *testing.T) {
	t.Parallel()
	up := newCounting(t)
	c := newClock()
	reg := newRegistry(t, c)
	hc := &config.HealthCheck{Path: "/healthz", Interval: 5 * time.Second, Timeout: 5 * time.Second, Healthy: 1, Unhealthy: 1}
	p := build(t, reg, "", hc, up.URL)
	up.status.Store(503)
	reg.Current().Check(context.Background(), c.Now())
	_, err := get(t, p, p.Base())
	if !errors.Is(err, ErrNoHealthyTarget) {
		t.Fatalf("got %v, want ErrNoHealthyTarget", err)
	}
	if p.Ready(c.Now()) {
		t.Errorf("Ready: got true for a pool with its only target failing its health check")
	}
}

func TestActiveHealthCheck(t *testing.T) {
	t.Parallel()
	a, b := newCounting(t), newCounting(t)
	c := newClock()
	reg := newRegistry(t, c)
	hc := &config.HealthCheck{Path: "/healthz", Interval: 5 * time.Second, Timeout: 5 * time.Second, Healthy: 2, Unhealthy: 3}
	p := build(t, reg, "", hc, a.URL, b.URL)
	set := reg.Current()
	aT := p.Targets()[0]
	steps := []struct {
		status int64
		want   string
	}{
		{200, "healthy"}, {500, "healthy"}, {500, "healthy"}, {500, "unhealthy"},
		{200, "unhealthy"}, {200, "healthy"},
	}
	for i, s := range steps {
		a.status.Store(s.status)
		if next := set.Check(context.Background(), c.Now()); !next.Equal(c.Now().Add(hc.Interval)) {
			t.Fatalf("step %d: next check at %v, want %v", i, next, c.Now().Add(hc.Interval))
		}
		if got := aT.State(c.Now()).State; got != s.want {
			t.Errorf("step %d (probe answered %d): got %s, want %s", i, s.status, got, s.want)
		}
		if i == 3 {
			before := a.n.Load()
			for range 20 {
				get(t, p, p.Base())
			}
			if got := a.n.Load() - before; got != 0 {
				t.Errorf("an unhealthy target got %d requests, want 0", got)
			}
		}
		// A check not yet due probes nothing.
		set.Check(context.Background(), c.Now().Add(time.Second))
		c.Add(hc.Interval)
	}
}

func TestReloadKeepsTargets(t *testing.T) {
	t.Parallel()
	a, b, d := newCounting(t), newCounting(t), newCounting(t)
	c := newClock()
	reg := newRegistry(t, c)
	p1 := buildOutlier(t, reg, "", nil, outlier5xx(), a.URL, b.URL)
	// b is ejected in the first set.
	b.status.Store(500)
	for b.n.Load() < DefaultFailures {
		get(t, p1, p1.Base())
	}
	p2 := buildOutlier(t, reg, "", nil, outlier5xx(), a.URL, b.URL, d.URL)
	t1, t2 := p1.Targets(), p2.Targets()
	if t1[0] != t2[0] || t1[1] != t2[1] {
		t.Fatalf("the targets kept by a reload are new ones")
	}
	if got := t2[1].State(c.Now()).State; got != "ejected" {
		t.Errorf("a kept target's state: got %s, want ejected as before the reload", got)
	}
	// A target removed and added back starts over.
	build(t, reg, "", nil, a.URL)
	p4 := build(t, reg, "", nil, a.URL, b.URL)
	if p4.Targets()[1] == t1[1] || p4.Targets()[1].State(c.Now()).State != "healthy" {
		t.Errorf("a target removed and added back kept its old state")
	}
}

func TestRouteTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	p := build(t, newRegistry(t, nil), "", nil, slow.URL)
	_, err := get(t, WithTimeout(p, 50*time.Millisecond), p.Base())
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a timeout", err)
	}
}

// Upgrade responses pass through unwrapped, as ReverseProxy needs them.
func TestUpgradeBodyIsReadWriter(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Write([]byte("echo " + line))
	}))
	t.Cleanup(s.Close)
	p := build(t, newRegistry(t, nil), "", nil, s.URL)
	req, _ := http.NewRequest(http.MethodGet, p.Base().String()+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("got %d with a %T body, want 101 with an io.ReadWriteCloser", resp.StatusCode, resp.Body)
	}
	defer rw.Close()
	rw.Write([]byte("hi\n"))
	got, _ := bufio.NewReader(rw).ReadString('\n')
	if got != "echo hi\n" {
		t.Errorf("got %q through the upgraded connection, want %q", got, "echo hi\n")
	}
}

func TestReloadKeepsConnections(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	a := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "a") }))
	a.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	a.Start()
	t.Cleanup(a.Close)
	b := newCounting(t)
	reg := newRegistry(t, nil)
	p1 := build(t, reg, config.BalanceRoundRobin, nil, a.URL)
	for range 5 {
		if _, err := get(t, p1, p1.Base()); err != nil {
			t.Fatal(err)
		}
	}
	// The pool changes: a target is added, the balancing stays.
	p2 := build(t, reg, config.BalanceRoundRobin, nil, a.URL, b.URL)
	for range 10 {
		if _, err := get(t, p2, p2.Base()); err != nil {
			t.Fatal(err)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("the kept target got %d connections across the reload, want its one keep-alive connection", got)
	}
	if b.n.Load() != 5 {
		t.Errorf("the new target got %d of 10 requests, want 5", b.n.Load())
	}
}

func TestOutlierSettingsOfAnUpstream(t *testing.T) {
	t.Parallel()
	bad, good := newCounting(t), newCounting(t)
	bad.status.Store(500)
	c := newClock()
	reg := newRegistry(t, c)
	set, err := reg.Build([]config.Upstream{{Name: "p", Balancing: config.BalanceRoundRobin,
		Targets: []config.Target{{URL: mustURL(t, bad.URL), Weight: 1}, {URL: mustURL(t, good.URL), Weight: 1}},
		Outlier: &config.Outlier{Failures: 2, Ejection: time.Second, MaxEjection: time.Second, Statuses: []config.StatusRange{{Lo: 500, Hi: 503}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Pool("p")
	for bad.n.Load() < 2 {
		get(t, p, p.Base())
	}
	st := p.Targets()[0].State(c.Now())
	if st.State != "ejected" || !st.EjectedUntil.Equal(c.Now().Add(time.Second)) {
		t.Fatalf("after 2 failures: got %+v, want ejected for 1s", st)
	}
	// Ejected again: still 1s, the maximum.
	c.Add(time.Second)
	for bad.n.Load() < 4 {
		get(t, p, p.Base())
	}
	if st := p.Targets()[0].State(c.Now()); !st.EjectedUntil.Equal(c.Now().Add(time.Second)) {
		t.Errorf("second ejection: got %+v, want 1s again (maxEjection)", st)
	}
}

// TestCallersTraceIsKept sends requests that carry a trace of their own,
// as httputil.ReverseProxy's do (its Got1xxResponse forwards 1xx
// responses): the pool's retries still tell a refused connection from a
// request that reached its target, and the caller's hooks all still run,
// once per request.
func TestCallersTraceIsKept(t *testing.T) {
	t.Parallel()
	hints := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(hints.Close)
	cutter1, cut1 := newCutter(t)
	cutter2, cut2 := newCutter(t)
	tests := []struct {
		name    string
		targets []string
		// wantErr is a request that reached a target that then failed:
		// never retried.
		wantErr  bool
		want1xx  int64
		wantSent func() int64
	}{
		{name: "refused, then retried", targets: []string{deadURL(t), hints.URL}, want1xx: 1},
		{name: "reached, not retried", targets: []string{cutter1.URL, cutter2.URL}, wantErr: true,
			wantSent: func() int64 { return cut1.Load() + cut2.Load() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A registry of its own: the dead target is ejected by
			// failures in a row, which this test must not reach.
			reg := newRegistry(t, nil)
			p := build(t, reg, "", nil, tt.targets...)
			for i := range int64(DefaultFailures - 1) {
				var gotConn, got1xx atomic.Int64
				trace := &httptrace.ClientTrace{
					GotConn: func(httptrace.GotConnInfo) { gotConn.Add(1) },
					Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
						if code == http.StatusEarlyHints {
							got1xx.Add(1)
						}
						return nil
					},
				}
				ctx := httptrace.WithClientTrace(context.Background(), trace)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Base().String()+"/x", nil)
				req.Body = io.NopCloser(strings.NewReader(""))
				req.ContentLength = 0
				req.TransferEncoding = []string{"identity"}
				resp, err := p.RoundTrip(req)
				if tt.wantErr {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("request %d: got %d, want an error", i, resp.StatusCode)
					}
					if got := tt.wantSent(); got != i+1 {
						t.Fatalf("request %d: the targets got %d requests, want %d: one each, never retried", i, got, i+1)
					}
				} else {
					if err != nil {
						t.Fatalf("request %d: %v; want it retried on the live target", i, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if got := gotConn.Load(); got != 1 {
					t.Errorf("request %d: the caller's GotConn ran %d times, want 1", i, got)
				}
				if got := got1xx.Load(); got != tt.want1xx {
					t.Errorf("request %d: the caller's Got1xxResponse saw %d early hints, want %d", i, got, tt.want1xx)
				}
			}
		})
	}
}
