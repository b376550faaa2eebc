package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// TestH2CTargets sends requests and health checks to a server that
// speaks HTTP/2 without TLS only: they reach it over HTTP/2 through an
// h2c target, and fail through an http one (HTTP/1.1).
func TestH2CTargets(t *testing.T) {
	t.Parallel()
	var protos sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.URL.Path, r.Proto)
		io.WriteString(w, r.Proto)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()
	c := newClock()
	reg := newRegistry(t, c)
	hc := &config.HealthCheck{Path: "/healthz", Interval: 5 * time.Second, Timeout: 5 * time.Second, Healthy: 1, Unhealthy: 1}
	p := build(t, reg, "", hc, "h2c://"+host)
	if got := p.Base().Scheme; got != "h2c" {
		t.Errorf("Base scheme: got %s, want h2c", got)
	}
	req, _ := http.NewRequest(http.MethodGet, p.Base().String()+"/x", nil)
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Fatalf("through an h2c target: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "HTTP/2.0" || resp.ProtoMajor != 2 {
		t.Errorf("through an h2c target: got %q over %s, want HTTP/2.0", b, resp.Proto)
	}
	reg.Current().Check(context.Background(), c.Now())
	if got, _ := protos.Load("/healthz"); got != "HTTP/2.0" {
		t.Errorf("health check: got %v, want an HTTP/2.0 probe", got)
	}
	if st := p.Targets()[0].State(c.Now()); st.State != "healthy" {
		t.Errorf("after the probe: got %s, want healthy", st.State)
	}

	plain := build(t, newRegistry(t, nil), "", nil, "http://"+host)
	if code, err := get(t, plain, plain.Base()); err == nil {
		t.Errorf("HTTP/1.1 to a server of HTTP/2 only: got %d, want an error", code)
	}
}
