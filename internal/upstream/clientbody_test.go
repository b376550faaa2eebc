package upstream

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
