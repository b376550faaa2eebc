// Package xdstest runs a state-of-the-world ADS server of RateLimitConfig
// resources for tests, built as Envoy Gateway's rate-limit runner builds
// its own (envoyproxy/gateway internal/globalratelimit/runner): a
// go-control-plane snapshot cache keyed by node ID, its SotW server on a
// gRPC server with mutual TLS, and snapshots pushed by version.
//
// It is for tests only and must not be imported by code the gateway runs.
package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// Server is a running ADS server.
type Server struct {
	// Addr is the server's host:port on the loopback interface.
	Addr string

	cache cachev3.SnapshotCache
	grpc  *grpc.Server

	mu      sync.Mutex
	reqs    []*discoveryv3.DiscoveryRequest
	changed chan struct{} // closed and replaced on every request
}

// MutualTLS returns the server's and a client's TLS configurations of a
// mutual TLS in which both sides present cert and trust it alone, as
// Envoy Gateway's components do with the one certificate of their
// secret.
func MutualTLS(cert tlstest.Cert) (server, client *tls.Config) {
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		panic(err) // tlstest makes valid pairs
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Cert)
	server = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	return server, client
}

// Start runs a server with tlsConf (nil for plain text) on a free
// loopback port until the test ends or Stop.
func Start(t testing.TB, tlsConf *tls.Config) *Server {
	t.Helper()
	return StartAt(t, tlsConf, "127.0.0.1:0")
}

// StartAt is Start on addr: a server that comes back where a stopped one
// was.
func StartAt(t testing.TB, tlsConf *tls.Config, addr string) *Server {
	t.Helper()
	s := &Server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	xds := serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			s.reqs = append(s.reqs, r)
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return nil
		},
	})
	var opts []grpc.ServerOption
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	s.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, xds)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	go s.grpc.Serve(ln)
	t.Cleanup(func() {
		s.grpc.Stop()
		cancel()
	})
	return s
}

// Stop closes the server and every stream at once.
func (s *Server) Stop() { s.grpc.Stop() }

// Push sets the snapshot of node to version with configs, as Envoy
// Gateway's runner does on every translation.
func (s *Server) Push(t testing.TB, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(configs))
	for i, c := range configs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// WaitRequest waits up to timeout for a request from a client that
// satisfies ok, among all received since the server started, and returns
// it; it fails the test when none comes.
func (s *Server) WaitRequest(t testing.TB, timeout time.Duration, what string, ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		reqs, changed := s.reqs[seen:], s.changed
		seen = len(s.reqs)
		s.mu.Unlock()
		for _, r := range reqs {
			if ok(r) {
				return r
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %s from the xDS client in %s", what, timeout)
			return nil
		}
	}
}

// Acked returns a predicate of a request that ACKs version.
func Acked(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == version && r.GetErrorDetail() == nil
	}
}

// Nacked returns a predicate of a request that NACKs a response while
// keeping version.
func Nacked(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetVersionInfo() == version && r.GetErrorDetail() != nil
	}
}
