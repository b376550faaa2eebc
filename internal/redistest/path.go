package redistest

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Path is a TCP path from a gateway to a Redis server, on its own loopback
// port, that a test can cut (new connections refused, open ones reset)
// and slow (every reply held back), whose connections it can close
// (Reset), and that can hold a request back to deliver it late (HoldNext),
// while Redis itself runs on: the
// faults of a network between them. Its methods are safe for concurrent
// use.
type Path struct {
	// Addr is the host:port to connect to instead of the server's.
	Addr string

	t      testing.TB
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	delay func() time.Duration
	hold  chan []byte // HoldNext's, until a request is held
	done  bool
}

// NewPath returns a path to srv, open. It is closed when the test ends.
func NewPath(t testing.TB, srv *Server) *Path {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listening for a path: %v", err)
	}
	p := &Path{Addr: ln.Addr().String(), t: t, target: srv.Addr, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// URL returns a redis:// URL of the path.
func (p *Path) URL() string { return "redis://" + p.Addr }

// Cut closes the path: connections open through it are closed and new
// ones are refused (nothing listens on its port) until Restore.
func (p *Path) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.closeConns()
}

// Reset closes the connections open through the path, as a Redis that
// closes its clients' connections (CLIENT KILL) does; new ones are
// accepted as before.
func (p *Path) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeConns()
}

// closeConns closes the connections open through the path; p.mu is held.
func (p *Path) closeConns() {
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Restore opens a cut path again on its port.
func (p *Path) Restore() {
	p.t.Helper()
	p.mu.Lock()
	if p.ln != nil || p.done {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; another process may take it only
	// in a race the test then reports.
	for range 50 {
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("redistest: reopening the path on %s: %v", p.Addr, err)
	}
	p.serve(ln)
}

// SetDelay holds back every reply from Redis by what delay returns for
// it, from now on (nil: none).
func (p *Path) SetDelay(delay func() time.Duration) {
	p.mu.Lock()
	p.delay = delay
	p.mu.Unlock()
}

func (p *Path) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

// forward carries one connection: requests as they come, replies after
// the path's delay.
func (p *Path) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() {
		p.requests(c, up)
		up.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			if delay != nil {
				time.Sleep(delay())
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// HoldNext holds back the next request a client sends through the path:
// its bytes are not forwarded, and its connection is closed, as one reset
// while the request is still on its way to Redis. The bytes come on the
// channel, for the test to deliver late (SendLate).
func (p *Path) HoldNext() <-chan []byte {
	ch := make(chan []byte, 1)
	p.mu.Lock()
	p.hold = ch
	p.mu.Unlock()
	return ch
}

// SendLate delivers req, a request HoldNext held, to Redis on a
// connection of its own, and returns the first line of Redis's reply:
// Redis has run it then.
func (p *Path) SendLate(req []byte) (string, error) {
	c, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// requests carries a connection's requests to Redis, but the one HoldNext
// holds.
func (p *Path) requests(c, up net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hold := p.hold
			p.hold = nil
			p.mu.Unlock()
			if hold != nil {
				hold <- bytes.Clone(buf[:n])
				c.Close()
				return
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Path) close() {
	p.Cut()
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
}
