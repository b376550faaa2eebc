// Package zktest starts real ZooKeeper servers for tests, standalone on a
// free loopback port with their data in the test's temporary directory,
// and stops them when the test ends.
//
// With go test -short, every test that asks for a server is skipped: a
// short run needs no external program. Otherwise a missing ZooKeeper
// fails the test rather than skipping it, so that CI cannot pass without
// the ZooKeeper tests (.ci/deps installs Debian's zookeeper package and
// a JRE).
package zktest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ratelimit-gateway/gateway/internal/servertest"
)

// readyTimeout bounds the wait for a server to answer: a JVM starts
// slowly on a loaded machine.
const readyTimeout = 60 * time.Second

// Jars are where Debian's zookeeper package puts the server and a logger
// that logs nothing; the server's own jar names the rest of its class
// path. ZOOKEEPER_CLASSPATH, if set, replaces them.
var Jars = []string{"/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-nop.jar"}

// Server is one standalone ZooKeeper. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is its client host:port on loopback.
	Addr string

	t         testing.TB
	java, cp  string
	dir, conf string

	proc servertest.Process

	mu     sync.Mutex // guards client
	client *zk.Conn
}

// Start starts a ZooKeeper and waits until it answers. It skips t with
// -short, and fails it if Java or ZooKeeper is not installed or the
// server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	java := servertest.Program(t, "zktest", "java", "zookeeper")
	cp := os.Getenv("ZOOKEEPER_CLASSPATH")
	if cp == "" {
		for _, j := range Jars {
			if _, err := os.Stat(j); err != nil {
				t.Fatalf("zktest: %v: install ZooKeeper (Debian: apt-get install zookeeper), as .ci/deps does, or set ZOOKEEPER_CLASSPATH", err)
			}
		}
		cp = strings.Join(Jars, ":")
	}
	var last error
	for range 3 {
		s := &Server{t: t, java: java, cp: cp, dir: t.TempDir()}
		s.Addr = freeAddr(t)
		if last = s.configure(); last == nil {
			if last = s.start(); last == nil {
				t.Cleanup(s.Stop)
				return s
			}
		}
	}
	t.Fatalf("zktest: starting ZooKeeper: %v", last)
	return nil
}

func freeAddr(t testing.TB) string {
	a, err := servertest.FreeAddr()
	if err != nil {
		t.Fatalf("zktest: finding a free port: %v", err)
	}
	return a
}

// configure writes the server's configuration: standalone, on Addr, no
// admin server, and the srvr command for start and Zxid.
func (s *Server) configure() error {
	host, port, _ := net.SplitHostPort(s.Addr)
	s.conf = filepath.Join(s.dir, "zoo.cfg")
	return os.WriteFile(s.conf, []byte(strings.Join([]string{
		"tickTime=500",
		"dataDir=" + filepath.Join(s.dir, "data"),
		"clientPort=" + port,
		"clientPortAddress=" + host,
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr",
		"maxSessionTimeout=60000",
		"",
	}, "\n")), 0o644)
}

func (s *Server) start() error {
	cmd := exec.Command(s.java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.jmx.log4j.disable=true", "-cp", s.cp,
		"org.apache.zookeeper.server.ZooKeeperServerMain", s.conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := s.proc.Start(cmd)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("zookeeper on %s exited: %s", s.Addr, out.String())
		default:
		}
		// ruok answers before the server serves; srvr tells.
		reply, err := s.command("srvr")
		if err == nil && strings.Contains(reply, "Zxid: ") {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("zookeeper on %s did not answer within %s: %q %v", s.Addr, readyTimeout, reply, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// command sends one of ZooKeeper's four-letter commands and returns the
// reply.
func (s *Server) command(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	_, err = bufio.NewReader(c).WriteTo(&b)
	return strings.TrimSpace(b.String()), err
}

// Zxid returns the id of the last transaction the server applied: it
// moves with any write.
func (s *Server) Zxid() int64 {
	s.t.Helper()
	reply, err := s.command("srvr")
	if err != nil {
		s.t.Fatalf("zktest: srvr: %v", err)
	}
	for _, line := range strings.Split(reply, "\n") {
		if v, ok := strings.CutPrefix(line, "Zxid: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
			if err != nil {
				s.t.Fatalf("zktest: srvr: %q: %v", line, err)
			}
			return n
		}
	}
	s.t.Fatalf("zktest: srvr: no Zxid in %q", reply)
	return 0
}

// URL returns zk://addr/path.
func (s *Server) URL(path string) string { return "zk://" + s.Addr + path }

// Client returns a connection for the test's own requests, closed when
// the test ends.
func (s *Server) Client() *zk.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, _, err := zk.Connect([]string{s.Addr}, 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			s.t.Fatal(err)
		}
		s.client = c
		s.t.Cleanup(c.Close)
	}
	return s.client
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// Stop kills the server and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() { s.proc.Stop() }

// Restart starts the server again on the same port with the same data,
// after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 20 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("zktest: restarting ZooKeeper: %s", err)
}
