package server

import (
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// DemoUpstream is the built-in upstream of --demo-upstream: it answers
// every request with a small JSON echo of what it received, so a new user
// can see the gateway work with nothing else running.
type DemoUpstream struct {
	// URL is the upstream's base URL.
	URL string
	srv *http.Server
}

// StartDemoUpstream starts a DemoUpstream on a free loopback port. It
// echoes exactly what reaches it: the method, path, query, Host and
// headers the gateway forwarded.
func StartDemoUpstream() (*DemoUpstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"upstream": "demo",
				"method":   r.Method,
				"path":     r.URL.Path,
				"query":    r.URL.RawQuery,
				"host":     r.Host,
				"headers":  r.Header,
			})
		}),
	}
	go srv.Serve(l)
	return &DemoUpstream{URL: "http://" + l.Addr().String(), srv: srv}, nil
}

// Close stops the upstream.
func (d *DemoUpstream) Close() error { return d.srv.Close() }
