// Package servertest holds what the test helpers that start real servers
// (redistest, etcdtest, zktest) share: the policy for a program a test
// needs, and a free loopback address.
//
// It is for tests only and must not be imported by code the gateway runs.
package servertest

import (
	"net"
	"os/exec"
	"sync"
	"testing"
)

// Program returns the path of the program name, which the tests of
// helper (e.g. "etcdtest") need. Under -short it skips t: the fast loop
// needs nothing but Go. Otherwise a missing program fails t, naming the
// Debian package that .ci/deps installs: in CI a missing server is a
// failure, never a skip.
func Program(t testing.TB, helper, name, debianPackage string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: skipped with -short: the test needs %s", helper, name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %s not found (%v): install it (Debian: apt-get install %s), as .ci/deps does", helper, name, err, debianPackage)
	}
	return p
}

// FreeAddr returns a loopback address, host:port, that was free a moment
// ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Process is a server process a test started. The zero value holds none;
// it is safe for concurrent use.
type Process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd and returns a channel that is closed when it exits.
func (p *Process) Start(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return done, nil
}

// Stop kills the process and waits for it to exit. Stopping a stopped
// process does nothing.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}
