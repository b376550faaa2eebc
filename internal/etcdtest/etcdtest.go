// Package etcdtest starts real etcd processes for tests, on free loopback
// ports in the test's temporary directory, and stops them when the test
// ends.
//
// With go test -short, every test that asks for a server is skipped: a
// short run needs no external program. Otherwise a missing etcd fails the
// test rather than skipping it, so that CI cannot pass without the etcd
// tests (.ci/deps installs Debian's etcd-server).
//
// It is for tests only and must not be imported by code the gateway runs.
package etcdtest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/servertest"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// readyTimeout bounds the wait for a server to answer.
const readyTimeout = 20 * time.Second

// Server is one single-member etcd. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is its client host:port on loopback.
	Addr string
	// CAFile is, for a server started with StartTLS, a PEM file of its
	// certificate, which verifies it.
	CAFile string

	t        testing.TB
	bin, dir string
	peer     string
	tls      *TLS
	certs    string // the directory of its TLS files

	proc servertest.Process

	mu     sync.Mutex // guards client
	client *clientv3.Client
}

// Start starts an etcd and waits until it is healthy. It skips t with
// -short, and fails it if etcd is not installed or does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

// TLS is how a server started with StartTLS serves its clients: with
// Cert, and, when ClientCA is set, only to clients whose certificate it
// verifies (--client-cert-auth).
type TLS struct {
	Cert     tlstest.Cert
	ClientCA *tlstest.Cert
}

// StartTLS starts an etcd that serves its clients over TLS only, as
// Start does.
func StartTLS(t testing.TB, tc TLS) *Server {
	t.Helper()
	return start(t, &tc)
}

func start(t testing.TB, tc *TLS) *Server {
	t.Helper()
	bin := servertest.Program(t, "etcdtest", "etcd", "etcd-server")
	var last error
	for range 5 {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), tls: tc}
		s.Addr, s.peer = freeAddr(t), freeAddr(t)
		if tc != nil {
			s.certs = t.TempDir()
			s.CAFile = s.write("ca.pem", tc.Cert.CertPEM)
		}
		if last = s.start(); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("etcdtest: starting etcd: %v", last)
	return nil
}

func freeAddr(t testing.TB) string {
	a, err := servertest.FreeAddr()
	if err != nil {
		t.Fatalf("etcdtest: finding a free port: %v", err)
	}
	return a
}

// write writes data to name in the server's directory of TLS files and
// returns its path.
func (s *Server) write(name string, data []byte) string {
	p := filepath.Join(s.certs, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	return p
}

// clientTLS returns the TLS configuration of the test's own clients: it
// trusts the server's certificate and presents the client CA's, which
// the server trusts. It is nil without TLS.
func (s *Server) clientTLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	roots := x509.NewCertPool()
	roots.AddCert(s.tls.Cert.Cert)
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if ca := s.tls.ClientCA; ca != nil {
		pair, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
		if err != nil {
			s.t.Fatalf("etcdtest: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

func (s *Server) scheme() string {
	if s.tls != nil {
		return "https://"
	}
	return "http://"
}

func (s *Server) start() error {
	client, peer := s.scheme()+s.Addr, "http://"+s.peer
	args := []string{
		"--name", "test", "--data-dir", s.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer, "--log-level", "error",
	}
	if s.tls != nil {
		args = append(args, "--cert-file", s.CAFile, "--key-file", s.write("key.pem", s.tls.Cert.KeyPEM))
		if ca := s.tls.ClientCA; ca != nil {
			args = append(args, "--client-cert-auth", "--trusted-ca-file", s.write("client-ca.pem", ca.CertPEM))
		}
	}
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := s.proc.Start(cmd)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: s.clientTLS()}}
	for {
		select {
		case <-done:
			return fmt.Errorf("etcd on %s exited: %s", s.Addr, out.String())
		default:
		}
		resp, err := hc.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/health: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("etcd on %s did not become healthy within %s: %v", s.Addr, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL returns etcd://addr/key, or etcds:// for a server started with
// StartTLS.
func (s *Server) URL(key string) string {
	if s.tls != nil {
		return "etcds://" + s.Addr + key
	}
	return "etcd://" + s.Addr + key
}

// Client returns a client for the test's own requests, closed when the
// test ends.
func (s *Server) Client() *clientv3.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.scheme() + s.Addr}, DialTimeout: 10 * time.Second, TLS: s.clientTLS(), Logger: zap.NewNop()})
		if err != nil {
			s.t.Fatal(err)
		}
		s.client = c
		s.t.Cleanup(func() { c.Close() })
	}
	return s.client
}

// Stop kills the server and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() { s.proc.Stop() }

// Restart starts the server again on the same ports with the same data,
// after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("etcdtest: restarting etcd: %s", err)
}
