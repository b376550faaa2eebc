package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/tracing/tracingtest"
)

// traceRules admit app-1 once a minute on /v1/user, and key /v1/keyed
// by a header.
const traceRules = `configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1
        unit: 60
      - api: /v1/keyed
        limit: 100
        unit: 60
        by: header:X-User-Id
`

// traceUpstream is a real upstream that keeps the traceparent of every
// request it receives.
type traceUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	parents []string
}

func newTraceUpstream(t *testing.T) *traceUpstream {
	u := &traceUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.parents = append(u.parents, r.Header.Get("Traceparent"))
		u.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *traceUpstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.parents...)
}

// traced serves a gateway of rules that traces every request to rcv
// over proto.
func traced(t *testing.T, rcv *tracingtest.Receiver, proto, rules string, edit func(*Config)) *live {
	t.Helper()
	return startLive(t, func(c *Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Tracing = tracing.Config{Enabled: true, Protocol: proto, Endpoint: rcv.URL, Sampler: "parentbased_always_on", BatchDelay: 10 * time.Millisecond}
		if edit != nil {
			edit(c)
		}
	})
}

// send sends GET path as app-1 with a trace context of trace id and
// span parent, and returns the status.
func send(t *testing.T, g *live, path, id, parent string, hdr ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.proxy+path, nil)
	req.Header.Set("X-App-Id", "app-1")
	req.Header.Set("Traceparent", "00-"+id+"-"+parent+"-01")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// traceID returns a trace ID of its own for each n.
func traceID(n int) string { return fmt.Sprintf("%032x", 0xa0000+n) }

const clientSpanID = "00f067aa0ba902b7"

// spansOf waits for the server span of trace id (it ends last) and
// returns the trace's server, decision and client spans (zero when
// missing), checking that the server span continues the client's.
func spansOf(t *testing.T, rcv *tracingtest.Receiver, id string) (srv, dec, client tracingtest.Span) {
	t.Helper()
	isServer := func(s tracingtest.Span) bool { return s.Kind.String() == "SPAN_KIND_SERVER" }
	spans := rcv.WaitFor(t, "server span of "+id, func(all []tracingtest.Span) bool {
		for _, s := range tracingtest.Trace(all, id) {
			if isServer(s) {
				return true
			}
		}
		return false
	})
	for _, s := range tracingtest.Trace(spans, id) {
		switch {
		case isServer(s):
			srv = s
		case s.Name == tracing.SpanDecide:
			dec = s
		case s.Kind.String() == "SPAN_KIND_CLIENT":
			client = s
		}
	}
	if srv.Parent != clientSpanID {
		t.Errorf("server span of %s: got parent %q, want the client's %s", id, srv.Parent, clientSpanID)
	}
	if dec.SpanID != "" && dec.Parent != srv.SpanID {
		t.Errorf("decision span of %s: got parent %s, want the server span %s", id, dec.Parent, srv.SpanID)
	}
	if client.SpanID != "" && client.Parent != srv.SpanID {
		t.Errorf("client span of %s: got parent %s, want the server span %s", id, client.Parent, srv.SpanID)
	}
	return srv, dec, client
}

// attr checks that s's attribute key is want.
func attr(t *testing.T, what string, attrs map[string]any, key string, want any) {
	t.Helper()
	if got := attrs[key]; got != want {
		t.Errorf("%s %s: got %v (%T), want %v (%T)", what, key, got, got, want, want)
	}
}

// TestTracesAdmittedAndRefused checks, over gRPC and over HTTP, the spans
// of an admitted request (server, decision, client; the upstream gets the
// client span's context) and of a refused one (server and decision, no
// client span), their attributes as docs/operations.md lists them, and
// the exemplar that links the duration histogram to the admitted trace.
func TestTracesAdmittedAndRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		proto string
		recv  func(testing.TB) *tracingtest.Receiver
	}{
		{name: "grpc", proto: tracing.ProtocolGRPC, recv: tracingtest.NewGRPC},
		{name: "http", proto: tracing.ProtocolHTTP, recv: tracingtest.NewHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := tc.recv(t)
			up := newTraceUpstream(t)
			g := traced(t, rcv, tc.proto, traceRules, func(c *Config) { c.Upstream = up.URL })
			admitted, refused, keyed := traceID(1), traceID(2), traceID(3)
			if code := send(t, g, "/v1/user/42", admitted, clientSpanID); code != 200 {
				t.Fatalf("first request: got %d, want 200", code)
			}
			if code := send(t, g, "/v1/user/42", refused, clientSpanID); code != 429 {
				t.Fatalf("second request: got %d, want 429", code)
			}
			if code := send(t, g, "/v1/keyed", keyed, clientSpanID, "X-User-Id", "alice"); code != 200 {
				t.Fatalf("keyed request: got %d, want 200", code)
			}

			srv, dec, client := spansOf(t, rcv, admitted)
			if srv.Name != "GET /v1/user" {
				t.Errorf("server span name: got %q, want %q", srv.Name, "GET /v1/user")
			}
			attr(t, "server", srv.Attrs, tracing.AttrDecision, "allowed")
			attr(t, "server", srv.Attrs, tracing.AttrApp, "app-1")
			attr(t, "server", srv.Attrs, tracing.AttrAppID, "app-1")
			attr(t, "server", srv.Attrs, tracing.AttrStore, "memory")
			attr(t, "server", srv.Attrs, "http.route", "/v1/user")
			attr(t, "server", srv.Attrs, "http.response.status_code", int64(200))
			attr(t, "server", srv.Attrs, "client.address", "127.0.0.1")
			attr(t, "decision", dec.Attrs, tracing.AttrDecision, "allowed")
			attr(t, "decision", dec.Attrs, tracing.AttrDecidedBy, "store")
			if len(dec.Events) != 1 || dec.Events[0].Name != tracing.EventLimit {
				t.Fatalf("decision events: got %+v, want one %s", dec.Events, tracing.EventLimit)
			}
			ev := dec.Events[0].Attrs
			attr(t, "limit", ev, tracing.AttrPolicy, "app-1/v1/user")
			attr(t, "limit", ev, tracing.AttrQuota, int64(1))
			attr(t, "limit", ev, tracing.AttrRemaining, int64(0))
			attr(t, "limit", ev, tracing.AttrWindow, 60.0)
			attr(t, "limit", ev, tracing.AttrAllowed, true)
			if client.SpanID == "" {
				t.Fatalf("no client span in the admitted trace")
			}
			attr(t, "client", client.Attrs, "http.request.method", "GET")
			attr(t, "client", client.Attrs, "http.response.status_code", int64(200))
			wantParent := "00-" + admitted + "-" + client.SpanID + "-01"
			if got := up.got(); len(got) < 1 || got[0] != wantParent {
				t.Errorf("upstream traceparent: got %q, want first %q (the client span's)", got, wantParent)
			}

			srv, dec, client = spansOf(t, rcv, refused)
			attr(t, "refused server", srv.Attrs, tracing.AttrDecision, "limited")
			attr(t, "refused server", srv.Attrs, "http.response.status_code", int64(429))
			attr(t, "refused decision", dec.Attrs, tracing.AttrDecision, "limited")
			if len(dec.Events) != 1 {
				t.Fatalf("refused decision events: got %+v, want one", dec.Events)
			}
			attr(t, "refused limit", dec.Events[0].Attrs, tracing.AttrAllowed, false)
			if ra, _ := dec.Events[0].Attrs[tracing.AttrRetryAfter].(float64); ra <= 0 {
				t.Errorf("refused limit %s: got %v, want > 0", tracing.AttrRetryAfter, dec.Events[0].Attrs[tracing.AttrRetryAfter])
			}
			if client.SpanID != "" {
				t.Errorf("refused request has a client span: %+v", client)
			}
			if n := len(up.got()); n != 2 {
				t.Errorf("upstream requests: got %d, want 2 (the refused one never forwarded)", n)
			}

			// The value a limit counts by is hashed, as the access log writes it.
			srv, _, _ = spansOf(t, rcv, keyed)
			key := tracing.AttrKeyHash + "header:X-User-Id"
			if h, _ := srv.Attrs[key].(string); len(h) != 16 || strings.Contains(fmt.Sprint(srv.Attrs), "alice") {
				t.Errorf("keyed server span: got %s %q in %v, want a 16-digit hash and no raw value", key, h, srv.Attrs)
			} else if h == observe.KeyHash("alice") {
				t.Errorf("keyed server span: %s %q is alice's plain sha256, which hashing likely values undoes; want it under the key-hash secret", key, h)
			}

			// The exemplars of the requests' durations: a bucket keeps the
			// last one, so the refused request, alone in its decision, is
			// there, and one of the two admitted ones.
			req, _ := http.NewRequest(http.MethodGet, "http://"+g.admin+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			buckets := grepLines(string(body), "gateway_request_duration_seconds_bucket")
			if !strings.Contains(grepLines(buckets, `decision="limited"`), `trace_id="`+refused+`"`) {
				t.Errorf("no exemplar with trace_id %s among the limited buckets of /metrics:\n%s", refused, buckets)
			}
			if allowed := grepLines(buckets, `decision="allowed"`); !strings.Contains(allowed, `trace_id="`+admitted+`"`) && !strings.Contains(allowed, `trace_id="`+keyed+`"`) {
				t.Errorf("no exemplar with trace_id %s or %s among the allowed buckets of /metrics:\n%s", admitted, keyed, buckets)
			}
		})
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTracesRouteRetry: a request routed to a pool whose first target
// refuses connections is retried on the other; its client span records
// the retry, and the live target receives the client span's context.
func TestTracesRouteRetry(t *testing.T) {
	t.Parallel()
	rcv := tracingtest.NewGRPC(t)
	up := newTraceUpstream(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	rules := fmt.Sprintf(`upstreams:
  - name: users
    targets: [%s, %s]
    balancing: round-robin
routes:
  - path: /v1
    upstream: users
`, dead, up.URL) + traceRules
	g := traced(t, rcv, tracing.ProtocolGRPC, rules, func(c *Config) { c.Upstream = "" })
	// Round-robin tries the dead target first for one of any two
	// requests, until it is ejected.
	for i := range 4 {
		if code := send(t, g, "/v1/keyed", traceID(10+i), clientSpanID); code != 200 {
			t.Fatalf("request %d: got %d, want 200 (retried on the live target)", i, code)
		}
	}
	var retried tracingtest.Span
	spans := rcv.WaitFor(t, "client span with a retry", func(all []tracingtest.Span) bool {
		for _, s := range all {
			for _, e := range s.Events {
				if e.Name == tracing.EventRetry {
					retried = s
					return true
				}
			}
		}
		return false
	})
	_ = spans
	srv, _, client := spansOf(t, rcv, retried.TraceID)
	if client.SpanID != retried.SpanID || retried.Kind.String() != "SPAN_KIND_CLIENT" {
		t.Fatalf("the retry is on %+v, want the trace's client span %+v", retried, client)
	}
	attr(t, "server", srv.Attrs, tracing.AttrRoute, "/v1")
	attr(t, "server", srv.Attrs, tracing.AttrUpstream, "users")
	var ev tracingtest.Event
	for _, e := range retried.Events {
		if e.Name == tracing.EventRetry {
			ev = e
		}
	}
	attr(t, "retry", ev.Attrs, "server.address", strings.TrimPrefix(dead, "http://"))
	attr(t, "client", retried.Attrs, "http.response.status_code", int64(200))
	want := "00-" + retried.TraceID + "-" + retried.SpanID + "-01"
	found := false
	for _, p := range up.got() {
		found = found || p == want
	}
	if !found {
		t.Errorf("the live target got traceparents %q, want one %q (the retried client span's)", up.got(), want)
	}
}

// TestTracesFailMode: with Redis stopped, the decision span says the
// fail mode decided (local), with an error status, where before it said
// the store did, by a call to Redis.
func TestTracesFailMode(t *testing.T) {
	t.Parallel()
	red := redistest.Start(t)
	rcv := tracingtest.NewGRPC(t)
	g := traced(t, rcv, tracing.ProtocolGRPC, traceRules, func(c *Config) {
		c.Store, c.RedisURL, c.RedisTimeout, c.FailMode = stores.StoreRedis, red.URL(), 5*time.Second, failmode.Local
	})
	up, down := traceID(20), traceID(21)
	if code := send(t, g, "/v1/keyed", up, clientSpanID, "X-User-Id", "bob"); code != 200 {
		t.Fatalf("with Redis: got %d, want 200", code)
	}
	srv, dec, _ := spansOf(t, rcv, up)
	attr(t, "server", srv.Attrs, tracing.AttrStore, "redis")
	attr(t, "decision", dec.Attrs, tracing.AttrDecidedBy, "store")
	attr(t, "decision", dec.Attrs, tracing.AttrSource, "redis")
	if dec.StatusError {
		t.Errorf("decision with Redis up has an error status")
	}
	red.Stop()
	if code := send(t, g, "/v1/keyed", down, clientSpanID, "X-User-Id", "bob"); code != 200 {
		t.Fatalf("with Redis stopped: got %d, want 200 (fail mode local)", code)
	}
	srv, dec, client := spansOf(t, rcv, down)
	attr(t, "decision", dec.Attrs, tracing.AttrDecidedBy, "local")
	attr(t, "decision", dec.Attrs, tracing.AttrDecision, "allowed")
	attr(t, "server", srv.Attrs, tracing.AttrDecision, "allowed")
	if !dec.StatusError {
		t.Errorf("decision by the fail mode: want an error status")
	}
	if client.SpanID == "" {
		t.Errorf("the request admitted by the fail mode has no client span")
	}
}
