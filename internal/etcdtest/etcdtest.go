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
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/servertest"
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

	t        testing.TB
	bin, dir string
	peer     string

	proc servertest.Process

	mu     sync.Mutex // guards client
	client *clientv3.Client
}

// Start starts an etcd and waits until it is healthy. It skips t with
// -short, and fails it if etcd is not installed or does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := servertest.Program(t, "etcdtest", "etcd", "etcd-server")
	var last error
	for range 5 {
		s := &Server{t: t, bin: bin, dir: t.TempDir()}
		s.Addr, s.peer = freeAddr(t), freeAddr(t)
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

func (s *Server) start() error {
	client, peer := "http://"+s.Addr, "http://"+s.peer
	cmd := exec.Command(s.bin,
		"--name", "test", "--data-dir", s.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test="+peer, "--log-level", "error",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := s.proc.Start(cmd)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	hc := &http.Client{Timeout: time.Second}
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

// URL returns etcd://addr/key.
func (s *Server) URL(key string) string { return "etcd://" + s.Addr + key }

// Client returns a client for the test's own requests, closed when the
// test ends.
func (s *Server) Client() *clientv3.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + s.Addr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
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
