package source_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

func newZK(t *testing.T, srv *zktest.Server, path string, auth source.ZKAuth) source.Store {
	t.Helper()
	st, err := source.NewStore(source.Config{Spec: srv.URL(path), ZK: auth, Timeout: 5 * time.Second, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// zkSet writes the znode at path as another client would, creating it
// and its parents if need be, and returns its data version.
func zkSet(t *testing.T, srv *zktest.Server, path, value string) int64 {
	t.Helper()
	c := srv.Client()
	stat, err := c.Set(path, []byte(value), -1)
	if errors.Is(err, zk.ErrNoNode) {
		for i := 1; i < len(path); i++ {
			if path[i] == '/' {
				c.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll))
			}
		}
		if _, err := c.Create(path, []byte(value), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return int64(stat.Version)
}

// TestZKLoadAndWatch checks that the source reads the znode, with its
// data version as version and the format from the content; that a write
// is seen by Watch; that an invalid value is refused with its line; and
// that a deleted and re-created znode is seen too.
func TestZKLoadAndWatch(t *testing.T) {
	srv := zktest.Start(t)
	zkSet(t, srv, "/gateway/rules", rulesA)
	src := newZK(t, srv, "/gateway/rules", source.ZKAuth{})

	r, version, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Apps[0].ID != "a" || version != "0" {
		t.Errorf("Load: got app %q version %s, want a at 0", r.Apps[0].ID, version)
	}
	if st := src.Status(); !st.Connected || st.Version != "0" {
		t.Errorf("Status: got %+v, want connected at version 0", st)
	}

	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })

	v := zkSet(t, srv, "/gateway/rules", rulesB)
	eventually.True(t, wait, func() bool { return changes.Load() > 0 }, "Watch did not report the write")
	r, version, err = src.Load(context.Background())
	if err != nil || r.Apps[0].ID != "b" || version != itoa(v) {
		t.Fatalf("Load after the write: got %v version %s, %v; want the XML rules of b at %d", r, version, err, v)
	}

	zkSet(t, srv, "/gateway/rules", invalid)
	_, _, err = src.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), srv.URL("/gateway/rules")+":4: limit -5 is below -1") {
		t.Errorf("Load of an invalid value: got %v, want the znode and line 4", err)
	}

	// Deleted, then created again with the same data version (0): the
	// change is still seen.
	n := changes.Load()
	if err := srv.Client().Delete("/gateway/rules", -1); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, wait, func() bool { return changes.Load() > n }, "Watch did not report the deletion")
	n = changes.Load()
	zkSet(t, srv, "/gateway/rules", rulesA)
	eventually.True(t, wait, func() bool { return changes.Load() > n }, "Watch did not report the creation")
	if r, version, err := src.Load(context.Background()); err != nil || r.Apps[0].ID != "a" || version != "0" {
		t.Errorf("Load after the re-creation: got %v version %s, %v", r, version, err)
	}
}

// TestZKReconnect checks that a running source reports a lost store,
// keeps quiet about an unchanged znode, and reports the store's return so
// that the rules are read again; and that a source whose store is down at
// start serves its rules cache.
func TestZKReconnect(t *testing.T) {
	srv := zktest.Start(t)
	zkSet(t, srv, "/gateway/rules", rulesA)
	cache := filepath.Join(t.TempDir(), "rules-cache")
	src, err := source.New(source.Config{Spec: srv.URL("/gateway/rules"), CacheFile: cache, Timeout: 2 * time.Second, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := src.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })

	srv.Stop()
	eventually.True(t, wait, func() bool { return !src.Status().Connected }, "Status still connected with ZooKeeper stopped")
	if n := changes.Load(); n != 0 {
		t.Errorf("onChange calls before the store returned: got %d, want 0", n)
	}
	cold, err := source.New(source.Config{Spec: srv.URL("/gateway/rules"), CacheFile: cache, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	if r, version, err := cold.Load(context.Background()); err != nil || r.Apps[0].ID != "a" || version != "cache" {
		t.Errorf("Load at start with ZooKeeper down: got %v version %q, %v; want the cache", r, version, err)
	}

	srv.Restart()
	eventually.True(t, wait, func() bool { return src.Status().Connected && changes.Load() > 0 }, "no reconnection reported")
}

func TestZKPut(t *testing.T) {
	testPut(t, newZK(t, zktest.Start(t), "/gateway/rules", source.ZKAuth{}))
}

// TestZKAuth checks digest authentication: the rules written with
// credentials are readable with them, from the environment's password or
// a file, and refused, with what to do, without them.
func TestZKAuth(t *testing.T) {
	srv := zktest.Start(t)
	auth := source.ZKAuth{Username: "gateway", Password: "s3cret"}
	st := newZK(t, srv, "/secure/rules", auth)
	if _, err := st.Put(context.Background(), []byte(rulesA), source.Value{Version: source.NoVersion}, 10); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		auth source.ZKAuth
		err  string
	}{
		{name: "password", auth: auth},
		{name: "password file", auth: source.ZKAuth{Username: "gateway", PasswordFile: pw}},
		{name: "none", err: "GATEWAY_ZK_USERNAME"},
		{name: "wrong", auth: source.ZKAuth{Username: "gateway", Password: "guess"}, err: "not authenticated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := newZK(t, srv, "/secure/rules", tt.auth).Load(context.Background())
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Load: got %v, want %q", err, tt.err)
			}
		})
	}
}

func TestParseZKURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec string
		servers    string
		path       string
		tls        bool
		err        string
	}{
		{name: "one", spec: "zk://h:2181/gateway/rules", servers: "h:2181", path: "/gateway/rules"},
		{name: "several", spec: "zk://a:1,b:2/r.yaml", servers: "a:1 b:2", path: "/r.yaml"},
		{name: "tls", spec: "zks://a:2281,b:2281/gateway/rules", servers: "a:2281 b:2281", path: "/gateway/rules", tls: true},
		{name: "other scheme", spec: "zkx://h:2181/k", err: "the scheme must be zk:// or zks://"},
		{name: "credentials", spec: "zk://u:p@h:2181/k", err: "put no credentials in the URL"},
		{name: "tls credentials", spec: "zks://u:p@h:2281/k", err: "zks://…: put no credentials in the URL"},
		{name: "no path", spec: "zk://h:2181/", err: "no znode path"},
		{name: "empty element", spec: "zk://h:2181/a//b", err: "empty, . or .. element"},
		{name: "no port", spec: "zk://h/k", err: "is not host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			servers, path, tlsOn, err := source.ParseZKURL(tt.spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("got %v, want an error with %q", err, tt.err)
				}
				if err != nil && strings.Contains(err.Error(), "u:p") {
					t.Errorf("the error shows the credentials: %v", err)
				}
				return
			}
			if got := strings.Join(servers, " "); err != nil || got != tt.servers || path != tt.path || tlsOn != tt.tls {
				t.Errorf("got %q %q TLS %v, %v; want %q %q TLS %v", got, path, tlsOn, err, tt.servers, tt.path, tt.tls)
			}
		})
	}
}

// TestZKHandshakeHeld holds the client's first connection open without
// an answer to its session request, as a ZooKeeper server that is still
// starting may, and forwards every later one: the client gives up on the
// held connection after one receive timeout (6.7s for the source's 10s
// session, third_party/go-zookeeper/zk/PATCHES.md) and connects through
// another. Upstream's client waits 67s on it, past this test's wait.
func TestZKHandshakeHeld(t *testing.T) {
	srv := zktest.Start(t)
	zkSet(t, srv, "/gateway/rules", rulesA)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heldClosed := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if n == 0 {
				// Read what comes, answer nothing, until the client
				// closes it.
				go func() {
					defer close(heldClosed)
					defer c.Close()
					io.Copy(io.Discard, c)
				}()
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", srv.Addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					io.Copy(up, c)
					up.Close()
				}()
				io.Copy(c, up)
			}()
		}
	}()
	src, err := source.New(source.Config{Spec: "zk://" + ln.Addr().String() + "/gateway/rules", Timeout: 2 * time.Second, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() {})
	select {
	case <-heldClosed:
	case <-time.After(40 * time.Second):
		t.Fatal("40s on, the client still waits for an answer on the held connection")
	}
	eventually.True(t, 40*time.Second, func() bool { return src.Status().Connected }, "not connected through the next connection: %+v", src.Status())
	if _, _, err := src.Load(context.Background()); err != nil {
		t.Errorf("Load once connected: %v", err)
	}
}
