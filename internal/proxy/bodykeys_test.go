package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// bodyEcho is an upstream that answers with the length and sha256 of the
// body it received.
func bodyEcho(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	w.Header().Set("X-Body", strconv.FormatInt(n, 10)+" "+hex.EncodeToString(h.Sum(nil)))
}

func bodyDigest(b string) string {
	sum := sha256.Sum256([]byte(b))
	return strconv.Itoa(len(b)) + " " + hex.EncodeToString(sum[:])
}

const bodyKeyRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 1
        unit: 1h
        by: body:model
        missing: share
        maxBody: 1024
      - api: /mcp
        limit: 1
        unit: 1h
        by: [body:params.name, body:user]
        missing: deny
`

// TestBodyKeys: a limit keyed on a field of the JSON body counts each
// value on its own counter; a body that is missing the field, is not
// JSON, nests too deep or is longer than maxBody falls under missing:;
// and the upstream receives every body byte for byte.
func TestBodyKeys(t *testing.T) {
	t.Parallel()
	us := httptest.NewServer(http.HandlerFunc(bodyEcho))
	t.Cleanup(us.Close)
	long := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	tests := []struct {
		name, path, body string
		chunked          bool
		// key is the value counted by ("" for the shared counter of
		// missing: share); status the answer.
		key    string
		status int
	}{
		{name: "model", path: "/v1/chat/completions", body: `{"model":"gpt-4o","messages":[]}`, key: "gpt-4o", status: 200},
		{name: "same model", path: "/v1/chat/completions", body: `{"messages":[], "model" : "gpt-4o"}`, key: "gpt-4o", status: 429},
		{name: "another model", path: "/v1/chat/completions", body: `{"model":"o3"}`, chunked: true, key: "o3", status: 200},
		// A byte-order mark before the document is not the document's
		// (RFC 8259, section 8.1).
		{name: "after a byte-order mark", path: "/v1/chat/completions", body: "\ufeff{\"model\":\"o8\"}", key: "o8", status: 200},
		{name: "same model after a mark", path: "/v1/chat/completions", body: "\ufeff{\"model\":\"gpt-4o\"}", key: "gpt-4o", status: 429},
		{name: "no model: shared", path: "/v1/chat/completions", body: `{"messages":[]}`, key: "", status: 200},
		{name: "malformed: shared", path: "/v1/chat/completions", body: `{"model":"o4"`, key: "", status: 429},
		{name: "over maxBody: shared", path: "/v1/chat/completions", body: long, key: "", status: 429},
		{name: "over maxBody, chunked: shared", path: "/v1/chat/completions", body: long, chunked: true, key: "", status: 429},
		{name: "deep nesting: shared", path: "/v1/chat/completions", body: `{"model":"o5","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, key: "", status: 429},
		{name: "two values: not JSON", path: "/v1/chat/completions", body: `{"model":"o6"}{"model":"o7"}`, key: "", status: 429},
		{name: "nested path and a number", path: "/mcp", body: `{"method":"tools/call","params":{"name":"search"},"user":42}`, key: "search, 42", status: 200},
		{name: "another tool", path: "/mcp", body: `{"method":"tools/call","params":{"name":"fetch"},"user":42}`, key: "fetch, 42", status: 200},
		{name: "missing: deny", path: "/mcp", body: `{"method":"tools/call","params":{}}`, status: 400},
		{name: "an object is no value", path: "/mcp", body: `{"params":{"name":{"a":1}},"user":1}`, status: 400},
	}
	g := newGWWith(t, bodyKeyRules, us.URL, &upstreamRecorder{})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	for i, tc := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var body io.Reader = strings.NewReader(tc.body)
		if tc.chunked {
			body = io.MultiReader(body) // no length: sent chunked
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+tc.path, body)
		req.Header.Set("X-App-Id", "app-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if got, want := resp.Header.Get("X-Body"), bodyDigest(tc.body); tc.status == 200 && got != want {
			t.Errorf("%s: the upstream received %q, want the body as sent, %q", tc.name, got, want)
		}
		g.obs.waitFor(t, i+1)
		if tc.status == 400 {
			continue
		}
		if l := limitsOf(g.obs.last()); len(l) != 1 || l[0].Key != tc.key {
			t.Errorf("%s: counted by %+v, want key %q", tc.name, l, tc.key)
		}
	}
}

// TestBodyKeyTimeout: a client that does not send the part of its body a
// body-keyed limit reads within BodyTimeout (--read-header-timeout) gets
// 408 request_timeout, counted by no limit and never forwarded, whatever
// Content-Length it declared; one that sends it in time is decided as
// usual.
func TestBodyKeyTimeout(t *testing.T) {
	t.Parallel()
	up := &upstreamRecorder{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	g := newGWWith(t, bodyKeyRules, us.URL, up, func(hc *HandlerConfig, _ *UpstreamConfig) {
		hc.BodyTimeout = 300 * time.Millisecond
	})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for i, tc := range []struct {
		name, head string
	}{
		{"part of a declared length", "Content-Length: 500\r\n\r\n" + `{"model":"gp`},
		{"a large declared length, nothing sent", "Content-Length: 1000\r\n\r\n"},
		{"chunked, part of a chunk", "Transfer-Encoding: chunked\r\n\r\n40\r\n" + `{"model":"gp`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-App-Id: app-1\r\n" + tc.head
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			// The client sends nothing more, and keeps its connection.
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"error":"request_timeout"`) {
				t.Errorf("got %d %s, want 408 request_timeout", resp.StatusCode, body)
			}
			g.obs.waitFor(t, i+1)
			if o := g.obs.last(); o.Decision != observe.DecisionInvalid || len(limitsOf(o)) != 0 {
				t.Errorf("observed %s with limits %+v, want invalid and none counted", o.Decision, limitsOf(o))
			}
		})
	}
	if seen := up.seen(); len(seen) != 0 {
		t.Errorf("the upstream saw %q, want nothing forwarded", seen)
	}
	// In time, it is decided and forwarded as usual.
	resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(up.seen()) != 1 {
		t.Errorf("a body sent in time: %d, the upstream saw %q; want 200 and it forwarded", resp.StatusCode, up.seen())
	}
}

// TestShadowBodyKeyWaits: a shadow limit keyed on the body never refuses,
// so it waits for the body however slowly it comes: a client that sends
// it after BodyTimeout is forwarded, counted on the shadow's key.
func TestShadowBodyKeyWaits(t *testing.T) {
	t.Parallel()
	up := &upstreamRecorder{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	g := newGWWith(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 1
        unit: 1h
        by: body:model
        shadow: true
`, us.URL, up, func(hc *HandlerConfig, _ *UpstreamConfig) {
		hc.BodyTimeout = 100 * time.Millisecond
	})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	body := `{"model":"gpt-4o"}`
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-App-Id: app-1\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+body[:5]); err != nil {
		t.Fatal(err)
	}
	// The rest comes well after BodyTimeout: the slow client is the case.
	time.Sleep(500 * time.Millisecond)
	if _, err := io.WriteString(c, body[5:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(up.seen()) != 1 {
		t.Fatalf("got %d, the upstream saw %q; want 200 and it forwarded", resp.StatusCode, up.seen())
	}
	g.obs.waitFor(t, 1)
	if l := limitsOf(g.obs.last()); len(l) != 1 || l[0].Key != "gpt-4o" {
		t.Errorf("counted by %+v, want the shadow's key gpt-4o", l)
	}
}

// TestBodyMemoryFull: the bodies read for keys share BodyMemory. While a
// client that sent part of its body holds most of it, a request whose
// read would pass it gets 503 body_memory_full with Retry-After, counted
// by no limit and not forwarded; a shadow limit alone, whose reads hold
// at most half the budget, goes without its value instead. A body the
// upstream has taken holds none of it, though its request is still in
// flight; once the slow client has sent the rest, the same request is
// decided and forwarded as usual.
func TestBodyMemoryFull(t *testing.T) {
	t.Parallel()
	took, release := make(chan struct{}, 1), make(chan struct{})
	us := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		if r.Header.Get("X-Hold") != "" {
			took <- struct{}{}
			<-release
		}
		w.Header().Set("X-Body", strconv.FormatInt(n, 10)+" "+hex.EncodeToString(h.Sum(nil)))
	}))
	t.Cleanup(us.Close)
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 100
        unit: 1h
        by: body:model
        maxBody: 65536
      - api: /shadow
        limit: 100
        unit: 1h
        by: body:model
        missing: share
        shadow: true
        maxBody: 65536
`
	g := newGWWith(t, rules, us.URL, &upstreamRecorder{}, func(hc *HandlerConfig, _ *UpstreamConfig) {
		hc.BodyMemory = 48 << 10
		hc.BodyTimeout = time.Minute
	})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	used := g.h.bodyMemory.used.Load
	body := `{"model":"gpt-4o","input":"` + strings.Repeat("x", 30000-29) + `"}`
	if len(body) != 30000 {
		t.Fatalf("body of %d bytes", len(body))
	}
	post := func(path string, hold bool) (*http.Response, error) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-App-Id", "app-1")
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		return srv.Client().Do(req)
	}
	// A request whose upstream took its body and has not answered holds
	// none of the budget.
	held := make(chan error, 1)
	go func() {
		resp, err := post("/v1/chat/completions", true)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Body") != bodyDigest(body) {
				err = fmt.Errorf("status %d, the upstream received %q", resp.StatusCode, resp.Header.Get("X-Body"))
			}
		}
		held <- err
	}()
	<-took
	if n := used(); n != 0 {
		t.Errorf("a request in flight whose upstream took its body holds %d bytes, want 0", n)
	}
	// A client that sent 20,000 bytes of its 30,000 holds a buffer of
	// 30,000 while it is read.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-App-Id: app-1\r\nContent-Length: 30000\r\n\r\n"+body[:20000]); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, func() bool { return used() == 30000 }, "the slow body holds %d bytes, want 30000", used())
	resp, err := post("/v1/chat/completions", false)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(msg), `"error":"body_memory_full"`) {
		t.Errorf("got %d (Retry-After %q) %s, want 503 body_memory_full with Retry-After: 1", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
	g.obs.waitFor(t, 1)
	if o := g.obs.last(); o.Decision != observe.DecisionOverloaded || len(limitsOf(o)) != 0 {
		t.Errorf("observed %s with limits %+v, want overloaded and none counted", o.Decision, limitsOf(o))
	}
	// A shadow limit alone goes without the value: its reads may hold
	// 24 KiB of the 48, and the body needs 30,000 bytes.
	resp, err = post("/shadow", false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Body") != bodyDigest(body) {
		t.Errorf("shadow: got %d, the upstream received %q; want 200 and the body as sent", resp.StatusCode, resp.Header.Get("X-Body"))
	}
	g.obs.waitFor(t, 2)
	if l := limitsOf(g.obs.last()); len(l) != 1 || l[0].Key != "" {
		t.Errorf("shadow: counted by %+v, want the shared key of missing: share", l)
	}
	// The slow client sends the rest: its request is decided and
	// forwarded.
	if _, err := io.WriteString(c, body[20000:]); err != nil {
		t.Fatal(err)
	}
	slow, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	slow.Body.Close()
	if slow.StatusCode != 200 || slow.Header.Get("X-Body") != bodyDigest(body) {
		t.Errorf("the slow client: got %d, the upstream received %q; want 200 and the body as sent", slow.StatusCode, slow.Header.Get("X-Body"))
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the held request: %v", err)
	}
	eventually.True(t, 30*time.Second, func() bool { return used() == 0 && g.h.bodyMemory.shadow.Load() == 0 },
		"%d bytes still taken after every request ended", used())
	resp, err = post("/v1/chat/completions", false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Body") != bodyDigest(body) {
		t.Errorf("after the others ended: got %d, the upstream received %q; want 200 and the body as sent", resp.StatusCode, resp.Header.Get("X-Body"))
	}
}

// TestBodyMemoryWarnsBelowLargestMaxBody checks the warning for rules
// that read bodies for keys larger than --max-body-memory can hold two of:
// logged when the handler starts with such rules and when they are
// swapped in, naming the limit; not for rules it holds well.
func TestBodyMemoryWarnsBelowLargestMaxBody(t *testing.T) {
	t.Parallel()
	yaml := func(maxBody int) string {
		return `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        limit: 100
        unit: 1h
        by: body:model
        maxBody: 65536
      - api: /v1/upload
        limit: 100
        unit: 1h
        by: body:user
        maxBody: ` + strconv.Itoa(maxBody) + "\n"
	}
	rules := func(maxBody int) *ruleset.Set { return compileRules(t, yaml(maxBody)) }
	const warning = "--max-body-memory holds fewer than two request bodies"
	for _, tc := range []struct {
		name    string
		memory  int64
		maxBody int
		warn    bool
	}{
		{"held", 1 << 20, 200 << 10, false},
		{"two bodies only just", 2 * (300<<10 + 1), 300 << 10, false},
		{"fewer than two", 1 << 20, 600 << 10, true},
		{"no cap", -1, 16 << 20, false},
		{"the default cap", 0, 16 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGWWith(t, yaml(tc.maxBody), "http://127.0.0.1:1", &upstreamRecorder{}, func(hc *HandlerConfig, _ *UpstreamConfig) {
				hc.BodyMemory = tc.memory
			})
			if got := strings.Contains(g.logs.String(), warning); got != tc.warn {
				t.Errorf("at start: warned %v, want %v; log:\n%s", got, tc.warn, g.logs.String())
			}
			if tc.warn && !strings.Contains(g.logs.String(), "max_body="+strconv.Itoa(tc.maxBody)+" app=app-1 api=/v1/upload") {
				t.Errorf("the warning does not name the limit and its maxBody:\n%s", g.logs.String())
			}
		})
	}
	// Swapped in: warned then, once per swap.
	g := newGWWith(t, yaml(100<<10), "http://127.0.0.1:1", &upstreamRecorder{}, func(hc *HandlerConfig, _ *UpstreamConfig) {
		hc.BodyMemory = 1 << 20
	})
	if strings.Contains(g.logs.String(), warning) {
		t.Fatalf("warned for rules it holds:\n%s", g.logs.String())
	}
	g.h.SetRules(rules(1 << 20))
	if n := strings.Count(g.logs.String(), warning); n != 1 {
		t.Errorf("%d warnings after rules past the cap were swapped in, want 1:\n%s", n, g.logs.String())
	}
}
