package rls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/rlsxds"
)

// extraServer is the debug or the metrics HTTP server.
type extraServer struct {
	name string
	ln   net.Listener
	srv  *http.Server
}

func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

func (s *Server) addExtra(name, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	s.extra = append(s.extra, extraServer{name: name, ln: ln, srv: s.httpServer(h)})
	return nil
}

// listen listens on a TCP address, or on a Unix socket given as
// "unix:PATH" (envoyproxy/ratelimit's GRPC_UDS).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// keepalive returns the gRPC server options of MaxConnectionAge.
func (s *Server) keepalive() []grpc.ServerOption {
	if s.cfg.MaxConnectionAge <= 0 {
		return nil
	}
	return []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: s.cfg.MaxConnectionAge, MaxConnectionAgeGrace: s.cfg.MaxConnectionAgeGrace,
	})}
}

// tlsConfig returns the gRPC server's TLS configuration, nil for plain
// text: the reloading pair, and with TLSClientCA the clients'
// certificates required and verified (TLSClientSAN checked).
func (s *Server) tlsConfig() (*tls.Config, error) {
	if s.certs == nil {
		return nil, nil
	}
	c := s.certs.TLSConfig("h2")
	if s.cfg.TLSClientCA == "" {
		return c, nil
	}
	pool, err := loadPool(s.cfg.TLSClientCA)
	if err != nil {
		return nil, fmt.Errorf("gRPC client CA: %w", err)
	}
	c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if san := s.cfg.TLSClientSAN; san != "" {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !hasSAN(cs.PeerCertificates[0], san) {
				return fmt.Errorf("the client certificate does not name %s", san)
			}
			return nil
		}
	}
	return c, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// hasSAN reports whether c names san as a DNS name, URI or IP address.
func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	return false
}

// newXDSClient returns the client of XDS, applying what it receives.
func (s *Server) newXDSClient() (*rlsxds.Client, error) {
	x := s.cfg.XDS
	var tc *tls.Config
	if x.UseTLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.ServerSAN}
		if tc.ServerName == "" {
			host, _, err := net.SplitHostPort(x.ServerURL)
			if err != nil {
				host = x.ServerURL
			}
			tc.ServerName = host
		}
		if x.CAFile != "" {
			pool, err := loadPool(x.CAFile)
			if err != nil {
				return nil, fmt.Errorf("xDS server CA: %w", err)
			}
			tc.RootCAs = pool
		}
		if x.CertFile != "" || x.KeyFile != "" {
			pair, err := tls.LoadX509KeyPair(x.CertFile, x.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("xDS client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
	}
	return rlsxds.New(rlsxds.Config{
		ServerURL: x.ServerURL, NodeID: x.NodeID, NodeMetadata: x.NodeMetadata, Headers: x.Headers, TLS: tc,
		BackoffInitial: x.BackoffInitial, BackoffMax: x.BackoffMax, MaxMsgSize: x.MaxMsgSize,
		Apply: s.applyXDS, Logger: s.log.With("xds", x.ServerURL),
	})
}

// applyXDS puts the resources of an xDS response in force, or refuses
// them, keeping the configuration in force, with the error that NACKs
// them. Counters are kept by their keys, so a push that keeps a
// descriptor keeps its count, as a file reload does.
func (s *Server) applyXDS(version string, rs []*rlsconfv3.RateLimitConfig) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.state.Load()
	c, err := rlsconfig.FromXDS(rs, s.loadOptions())
	if err != nil {
		s.metrics.ConfigFailed()
		st := *old
		st.lastErr, st.lastErrAt = err.Error(), time.Now()
		s.state.Store(&st)
		return err
	}
	s.install(c)
	s.log.Info("rls config applied from xDS", "version", version, "domains", len(c.Domains), "limits", c.Limits(), "sha256", c.SHA256)
	return nil
}

// healthcheck serves GET /healthcheck as envoyproxy/ratelimit does: 200
// "OK" while serving; 500 while draining, and with HealthyWithConfig
// until a configuration with a domain is in force.
func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case s.draining.Load():
		http.Error(w, "draining", http.StatusInternalServerError)
	case s.cfg.HealthyWithConfig && len(s.state.Load().configInUse.Domains) == 0:
		http.Error(w, "no config loaded", http.StatusInternalServerError)
	default:
		io.WriteString(w, "OK")
	}
}

// maxJSONBytes bounds the body of POST /json.
const maxJSONBytes = 1 << 20

// jsonHandler serves POST /json as envoyproxy/ratelimit does: a
// RateLimitRequest in protobuf's JSON, answered with the
// RateLimitResponse in JSON, status 429 when it is over the limit.
func (s *Server) jsonHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBytes+1))
	if err != nil || len(body) > maxJSONBytes {
		http.Error(w, "reading the request: too large or cut short", http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// dump writes c as envoyproxy/ratelimit's /rlconfig does: a line per
// limit, "DOMAIN.PATH: unit=UNIT requests_per_unit=N, shadow_mode: B,
// quota_mode: B", domains sorted.
func dump(c *rlsconfig.Config) string {
	var b strings.Builder
	names := make([]string, 0, len(c.Domains))
	for n := range c.Domains {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c.Domains[n].Walk(func(d *rlsconfig.Descriptor) {
			if d.Limit == nil {
				return
			}
			fmt.Fprintf(&b, "%s.%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				n, d.Path, d.Limit.Unit, d.Limit.RequestsPerUnit, d.ShadowMode, d.QuotaMode)
		})
	}
	return b.String()
}
