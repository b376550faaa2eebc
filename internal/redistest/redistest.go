// Package redistest starts real redis-server processes for tests, on free
// loopback ports in the test's temporary directory, and stops them when
// the test ends.
//
// With go test -short, every test that asks for a server is skipped: a
// short run needs no external program. Otherwise a missing redis-server
// fails the test rather than skipping it, so that CI cannot pass without
// the Redis tests (.ci/deps installs it).
//
// It is for tests only and must not be imported by code the gateway runs.
package redistest

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/ratelimit-gateway/gateway/internal/servertest"
	"github.com/redis/go-redis/v9"
)

// readyTimeout bounds the wait for a server to answer PING.
const readyTimeout = 10 * time.Second

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is its host:port on loopback.
	Addr string

	t    testing.TB
	dir  string
	argv func(port string) []string // the server's arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	client *redis.Client
}

// Start starts a redis-server with extra args (e.g. "--cluster-enabled",
// "yes") and waits until it answers. It skips t with -short, and fails it
// if redis-server is not installed or does not come up.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	return start(t, bin, func(dir, port string) []string {
		a := []string{
			"--port", port, "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"),
		}
		if major(bin) >= 7 {
			// DEBUG SLEEP makes a slow Redis; from 7 on it is off by default.
			a = append(a, "--enable-debug-command", "yes")
		}
		return append(a, args...)
	})
}

// StartSentinel starts a Redis Sentinel that watches master under the
// name name.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	host, mport, _ := net.SplitHostPort(master.Addr)
	return start(t, bin, func(dir, port string) []string {
		conf := filepath.Join(dir, "sentinel.conf")
		err := os.WriteFile(conf, []byte(strings.Join([]string{
			"port " + port, "bind 127.0.0.1", "dir " + dir,
			"logfile " + filepath.Join(dir, "redis.log"),
			"sentinel monitor " + name + " " + host + " " + mport + " 1",
			"sentinel down-after-milliseconds " + name + " 5000", "",
		}, "\n")), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	})
}

// start starts a server with the arguments argv gives for its directory
// and port, retrying on another port if it cannot listen.
func start(t testing.TB, bin string, argv func(dir, port string) []string) *Server {
	t.Helper()
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		dir, err := os.MkdirTemp(t.TempDir(), "redis-"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), t: t, dir: dir}
		s.argv = func(port string) []string { return argv(dir, port) }
		if last = s.start(bin); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", last)
	return nil
}

var versions sync.Map // binary path → major version

// major returns the major version of the redis-server at bin, 0 if unknown.
func major(bin string) int {
	if v, ok := versions.Load(bin); ok {
		return v.(int)
	}
	out, _ := exec.Command(bin, "--version").Output()
	// "Redis server v=7.0.15 sha=..."
	m := 0
	if _, v, ok := strings.Cut(string(out), "v="); ok {
		m, _ = strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	}
	versions.Store(bin, m)
	return m
}

// binary returns the path of a Redis program. It skips t with -short,
// and fails it if the program is not installed.
func binary(t testing.TB, name string) string {
	t.Helper()
	return servertest.Program(t, "redistest", name, "redis-server")
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	a, err := servertest.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(a)
	return strconv.Atoi(port)
}

func (s *Server) start(bin string) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(bin, s.argv(port)...)
	dieWithParent(cmd)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s%s", s.Addr, stderr.String(), log)
		default:
		}
		if pid, err := s.pid(); err == nil {
			if pid == cmd.Process.Pid {
				return nil
			}
			// Another test process's server took the port between
			// freePort and ours binding it (ours exits): answering as
			// ours, it would vanish or stall with that process's tests.
			s.kill()
			return fmt.Errorf("redis-server on %s: the port is pid %d's, not ours (%d)", s.Addr, pid, cmd.Process.Pid)
		} else if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer within %s: %v", s.Addr, readyTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pid returns the process ID of the server that answers on s.Addr (INFO
// server).
func (s *Server) pid() (int, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// URL returns redis://host:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a client of the server for the test's own commands (INFO,
// SCRIPT FLUSH, DEBUG SLEEP), closed when the test ends.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true, ReadTimeout: 10 * time.Second})
		s.t.Cleanup(func() { s.client.Close() })
	}
	return s.client
}

// Stop kills the server and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.kill()
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-done
}

// Restart starts the server again on the same port, empty (it saves
// nothing), after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	var err error
	// The port was just released; another process may take it in between,
	// which is as unlikely as it is fatal.
	for range 50 {
		if err = s.start(binary(s.t, "redis-server")); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server: %v", err)
}

// Pause stops the process (SIGSTOP) without closing its connections: a
// Redis that hangs. Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// Info returns the fields of INFO section as a map.
func (s *Server) Info(section string) map[string]string {
	s.t.Helper()
	return Info(s.t, s.Client(), section)
}

// Info returns the fields of INFO section of c's server as a map.
func Info(t testing.TB, c redis.Cmdable, section string) map[string]string {
	t.Helper()
	txt, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("redistest: INFO %s: %v", section, err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// Ready waits until store is ready: a Redis store's Ready dials its
// connections and loads its script and function library. One try of
// Ready is bounded by the store's DialTimeout, 1s by default, in which a
// loaded machine may not load the function library: like the gateway
// when Redis is not ready at its start, Ready tries again, and fails t
// if store is not ready within a minute.
func Ready(t testing.TB, store interface{ Ready(context.Context) error }) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := store.Ready(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: a minute on: %v", err)
		}
	}
}

// ScriptCalls returns how many EVAL, EVALSHA and FCALL calls c's server has run
// (INFO commandstats), failed ones included.
func ScriptCalls(t testing.TB, c redis.Cmdable) int64 {
	t.Helper()
	stats := Info(t, c, "commandstats")
	var n int64
	for _, cmd := range []string{"cmdstat_eval", "cmdstat_evalsha", "cmdstat_fcall"} {
		for _, f := range strings.Split(stats[cmd], ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// Cluster is a Redis Cluster: its masters and their replicas.
type Cluster struct {
	// Nodes are its servers.
	Nodes []*Server
}

// StartCluster starts n ≥ 3 redis-server processes in cluster mode, with
// extra args for each (e.g. "--cluster-require-full-coverage", "no"),
// joins them as masters without replicas with redis-cli --cluster create,
// and waits until every node reports the cluster ok.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	return StartReplicatedCluster(t, n, 0, args...)
}

// Addrs returns the addresses of the cluster's nodes.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr
	}
	return a
}
