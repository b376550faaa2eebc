package upstream

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// errBrokenBody stands for what reading a client's broken body gives the
// Transport (a malformed chunk size, a body cut short).
var errBrokenBody = errors.New("invalid byte in chunk length")

// brokenBody gives a few bytes, then errBrokenBody.
type brokenBody struct{ sent bool }

func (b *brokenBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "abc"), nil
	}
	return 0, errBrokenBody
}

func (b *brokenBody) Close() error { return nil }

// TestClientBodyErrorIsNotTheTargets sends, over HTTP/1.1 and HTTP/2
// (h2c), more requests whose body fails to read than eject a target: each
// fails with a *ClientBodyError wrapping the body's error, and no target
// has a failure counted, though one failure would eject it
// (docs/routes.md, "Health").
func TestClientBodyErrorIsNotTheTargets(t *testing.T) {
	t.Parallel()
	h2c := func(t *testing.T) string {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
		}))
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetUnencryptedHTTP2(true)
		s.Start()
		t.Cleanup(s.Close)
		return "h2c://" + s.Listener.Addr().String()
	}
	tests := []struct {
		name    string
		targets func(t *testing.T) []string
	}{
		{"http, two targets", func(t *testing.T) []string { return []string{newCounting(t).URL, newCounting(t).URL} }},
		{"http, one target", func(t *testing.T) []string { return []string{newCounting(t).URL} }},
		{"h2c, two targets", func(t *testing.T) []string { return []string{h2c(t), h2c(t)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			p := buildOutlier(t, newRegistry(t, c), "", nil, &config.Outlier{Failures: 1,
				Ejection: DefaultBaseEjection, MaxEjection: DefaultMaxEjection, MaxEjectionPercent: 100}, tt.targets(t)...)
			for i := range 4 * DefaultFailures {
				req, _ := http.NewRequest(http.MethodPost, p.Base().String()+"/x", &brokenBody{})
				resp, err := p.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("request %d: got %d, want an error", i, resp.StatusCode)
				}
				var be *ClientBodyError
				if !errors.As(err, &be) || !errors.Is(err, errBrokenBody) {
					t.Fatalf("request %d: got %v, want a *ClientBodyError wrapping %v", i, err, errBrokenBody)
				}
			}
			for _, s := range p.States(c.Now()) {
				if s.State != "healthy" || s.Failures != 0 || s.Ejections != 0 {
					t.Errorf("target %s: %+v, want healthy with no failure counted", s.URL, s)
				}
			}
		})
	}
}

// TestCheckBody: a RoundTripper that is not a pool tells a body that
// failed to read the same way, and passes every other request as is.
func TestCheckBody(t *testing.T) {
	t.Parallel()
	up := newCounting(t)
	rt := CheckBody(http.DefaultTransport)
	req, _ := http.NewRequest(http.MethodPost, up.URL+"/x", &brokenBody{})
	if resp, err := rt.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a broken body: got %d, want an error", resp.StatusCode)
	} else if be := (*ClientBodyError)(nil); !errors.As(err, &be) || be.Err != errBrokenBody {
		t.Fatalf("a broken body: got %v, want a *ClientBodyError wrapping %v", err, errBrokenBody)
	}
	for _, body := range []io.Reader{nil, http.NoBody, &brokenBody{sent: true}} {
		if b, ok := body.(*brokenBody); ok {
			b.sent = false
			body = io.LimitReader(b, 3) // the bytes, then EOF
		}
		req, _ := http.NewRequest(http.MethodPost, up.URL+"/x", body)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("body %T: %v", body, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("body %T: got %d, want 200", body, resp.StatusCode)
		}
	}
}

// TestTargetAbortMidBodyIsTheTargets has the target reset the request
// while the client is still sending its body, over HTTP/1.1 and HTTP/2
// in and out: that is the target's failure, counted against it, never a
// ClientBodyError, though the Transport closes the body it was reading
// (an HTTP/2 writer then sees its read fail with "body closed").
func TestTargetAbortMidBodyIsTheTargets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		inH2, outH2 bool
		targets     int
	}{
		{"h1 to h1, one target", false, false, 1},
		{"h2 to h2c, one target", true, true, 1},
		{"h2 to h2c, two targets", true, true, 2},
		{"h1 to h2c, one target", false, true, 1},
		{"h2 to h2c, no pool", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			aborted := make(chan struct{}, 2)
			target := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadFull(r.Body, make([]byte, 10))
				aborted <- struct{}{}
				panic(http.ErrAbortHandler)
			}), tc.outH2)
			scheme := "http://"
			if tc.outH2 {
				scheme = "h2c://"
			}
			var rt http.RoundTripper
			var p *Pool
			var base string
			if tc.targets == 0 {
				tr := &http.Transport{}
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
				rt, base = CheckBody(tr), target.URL
			} else {
				urls := []string{scheme + target.Listener.Addr().String()}
				if tc.targets == 2 {
					urls = append(urls, scheme+"localhost:"+strconv.Itoa(target.Listener.Addr().(*net.TCPAddr).Port))
				}
				c := newClock()
				p = buildOutlier(t, newRegistry(t, c), "", nil, &config.Outlier{Failures: 1,
					Ejection: DefaultBaseEjection, MaxEjection: DefaultMaxEjection, MaxEjectionPercent: 100}, urls...)
				rt, base = p, p.Base().String()
				defer func() {
					failed := int64(0)
					for _, s := range p.States(c.Now()) {
						failed += int64(s.Failures) + int64(s.Ejections)
					}
					if failed == 0 {
						t.Errorf("no failure counted against the target that reset the request: %+v", p.States(c.Now()))
					}
				}()
			}
			results := make(chan error, 1)
			front := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				out, _ := http.NewRequest("POST", base+"/x", r.Body)
				out.ContentLength = -1
				resp, err := rt.RoundTrip(out)
				if err == nil {
					resp.Body.Close()
				}
				results <- err
			}), tc.inH2)
			client := &http.Transport{}
			if tc.inH2 {
				client.Protocols = new(http.Protocols)
				client.Protocols.SetUnencryptedHTTP2(true)
			}
			t.Cleanup(client.CloseIdleConnections)
			pr, pw := io.Pipe()
			go func() {
				// Part of the body; the rest once the target reset it.
				pw.Write([]byte("0123456789abcdef"))
				<-aborted
				pw.Write([]byte("0123456789abcdef"))
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", front.URL, pr)
			go func() {
				if resp, err := (&http.Client{Transport: client}).Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			err := <-results
			var be *ClientBodyError
			if err == nil || errors.As(err, &be) {
				t.Errorf("RoundTrip: %v, want the target's failure, not the client's body", err)
			}
		})
	}
}

// serveBoth starts a server of h, with unencrypted HTTP/2 beside
// HTTP/1.1 when h2.
func serveBoth(t *testing.T, h http.Handler, h2 bool) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	if h2 {
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetUnencryptedHTTP2(true)
		s.Config.Protocols.SetHTTP1(true)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}
