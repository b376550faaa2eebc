// Package zktest starts real ZooKeeper servers for tests, standalone on a
// free loopback port with their data in the test's temporary directory,
// and stops them when the test ends.
//
// StartTLS starts one that also serves clients over TLS (ZooKeeper's
// secureClientPort), with certificates from tlstest.
//
// With go test -short, every test that asks for a server is skipped: a
// short run needs no external program. Otherwise a missing ZooKeeper
// fails the test rather than skipping it, so that CI cannot pass without
// the ZooKeeper tests (.ci/deps installs Debian's zookeeper package and
// a JRE).
//
// It is for tests only and must not be imported by code the gateway runs.
package zktest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ratelimit-gateway/gateway/internal/servertest"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// readyTimeout bounds the wait for a server to answer: a JVM starts
// slowly on a loaded machine.
const readyTimeout = 60 * time.Second

// Jars are where Debian's zookeeper package puts the server and a logger
// that logs nothing; the server's own jar names the rest of its class
// path. ZOOKEEPER_CLASSPATH, if set, replaces them.
var Jars = []string{"/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-nop.jar"}

// TLSJars are added to Jars for a TLS server. ZooKeeper serves TLS only
// through Netty, whose TLS handler needs netty-codec; Debian's
// zookeeper.jar names the other Netty jars in its class path but not
// that one (without it every handshake fails with NoClassDefFoundError:
// io/netty/handler/codec/ByteToMessageDecoder). Debian's libnetty-java,
// which zookeeper depends on, installs it.
var TLSJars = []string{"/usr/share/java/netty-codec.jar"}

// TLS is the TLS client port of a server StartTLS starts.
type TLS struct {
	// Cert is the server's certificate and key.
	Cert tlstest.Cert
	// ClientCA, when not nil, makes the server require a client
	// certificate that it verifies (mutual TLS). Without it the server
	// asks for none.
	ClientCA *tlstest.Cert
}

// Server is one standalone ZooKeeper. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is its client host:port on loopback.
	Addr string
	// TLSAddr is its TLS client host:port on loopback, empty unless
	// StartTLS started it. Addr still serves plain connections, for the
	// test's own requests (Client) and the four-letter commands.
	TLSAddr string
	// CAFile is a PEM file that verifies the TLS port's certificate,
	// empty unless StartTLS started it.
	CAFile string

	t         testing.TB
	java, cp  string
	dir, conf string
	tls       *TLS

	proc servertest.Process

	mu     sync.Mutex // guards client
	client *zk.Conn
}

// Start starts a ZooKeeper and waits until it answers. It skips t with
// -short, and fails it if Java or ZooKeeper is not installed or the
// server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

// StartTLS starts a ZooKeeper that also serves clients over TLS on
// TLSAddr, as tc says, and waits until it answers, as Start does, and
// until a TLS handshake on TLSAddr completes.
func StartTLS(t testing.TB, tc TLS) *Server {
	t.Helper()
	return start(t, &tc)
}

func start(t testing.TB, tc *TLS) *Server {
	t.Helper()
	java := servertest.Program(t, "zktest", "java", "zookeeper")
	cp := os.Getenv("ZOOKEEPER_CLASSPATH")
	if cp == "" {
		jars := Jars
		if tc != nil {
			jars = append(slices.Clone(Jars), TLSJars...)
		}
		for _, j := range jars {
			if _, err := os.Stat(j); err != nil {
				t.Fatalf("zktest: %v: install ZooKeeper (Debian: apt-get install zookeeper), as .ci/deps does, or set ZOOKEEPER_CLASSPATH", err)
			}
		}
		cp = strings.Join(jars, ":")
	}
	var last error
	for range 3 {
		s := &Server{t: t, java: java, cp: cp, dir: t.TempDir(), tls: tc}
		s.Addr = freeAddr(t)
		if tc != nil {
			s.TLSAddr = freeAddr(t)
		}
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
// admin server, and the srvr command for start and Zxid; with TLS, a
// secure client port on TLSAddr served by Netty, with PEM key and trust
// stores (ZooKeeper's Administrator's Guide, "Communication using the
// Netty framework" and "Encryption, Authentication, Authorization
// Options").
func (s *Server) configure() error {
	host, port, _ := net.SplitHostPort(s.Addr)
	s.conf = filepath.Join(s.dir, "zoo.cfg")
	lines := []string{
		"tickTime=500",
		"dataDir=" + filepath.Join(s.dir, "data"),
		"clientPort=" + port,
		"clientPortAddress=" + host,
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr",
		"maxSessionTimeout=60000",
	}
	if s.tls != nil {
		keyStore := filepath.Join(s.dir, "server.pem")
		s.CAFile = filepath.Join(s.dir, "ca.pem")
		if err := os.WriteFile(keyStore, slices.Concat(s.tls.Cert.KeyPEM, s.tls.Cert.CertPEM), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(s.CAFile, s.tls.Cert.CertPEM, 0o644); err != nil {
			return err
		}
		host, port, _ := net.SplitHostPort(s.TLSAddr)
		lines = append(lines,
			"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
			"secureClientPort="+port,
			"secureClientPortAddress="+host,
			"ssl.keyStore.location="+keyStore,
			"ssl.keyStore.type=PEM",
		)
		if ca := s.tls.ClientCA; ca != nil {
			trustStore := filepath.Join(s.dir, "client-ca.pem")
			if err := os.WriteFile(trustStore, ca.CertPEM, 0o644); err != nil {
				return err
			}
			lines = append(lines,
				"ssl.clientAuth=need",
				"ssl.trustStore.location="+trustStore,
				"ssl.trustStore.type=PEM",
			)
		} else {
			lines = append(lines, "ssl.clientAuth=none")
		}
	}
	return os.WriteFile(s.conf, []byte(strings.Join(append(lines, ""), "\n")), 0o644)
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
			return s.warmTLS(deadline)
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("zookeeper on %s did not answer within %s: %q %v", s.Addr, readyTimeout, reply, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// warmTLS, for a server with a TLS port, waits until a handshake on it
// completes, by deadline: the port may open after the plain one answers,
// and a JVM's first handshake is slow (about 2s on a loaded machine,
// against 0.1s for the next ones), which would eat into the timeout a
// test gives the handshake it tests. It presents the client certificate
// the server requires, if any.
func (s *Server) warmTLS(deadline time.Time) error {
	if s.tls == nil {
		return nil
	}
	roots := x509.NewCertPool()
	roots.AddCert(s.tls.Cert.Cert)
	host, _, _ := net.SplitHostPort(s.TLSAddr)
	tc := &tls.Config{RootCAs: roots, ServerName: host}
	if ca := s.tls.ClientCA; ca != nil {
		cert, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
		if err != nil {
			return err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	for {
		err := handshake(s.TLSAddr, tc, deadline)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("zookeeper's TLS port %s did not complete a handshake within %s: %v", s.TLSAddr, readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// handshake dials addr and completes a TLS handshake by deadline.
func handshake(addr string, tc *tls.Config, deadline time.Time) error {
	c, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	return tls.Client(c, tc).Handshake()
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

// TLSURL returns zks://tls-addr/path, for a server StartTLS started.
func (s *Server) TLSURL(path string) string { return "zks://" + s.TLSAddr + path }

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
