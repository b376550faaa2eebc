package source_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

// wait is how long the tests wait for something asynchronous: generous,
// for a loaded machine.
const wait = 30 * time.Second

const (
	rulesA = "configs:\n- appId: a\n  limits:\n  - {api: /a, limit: 1}\n"
	rulesB = `<rules><config appId="b"><limit api="/b" limit="2"/></config></rules>`
	// invalid has its problem on line 4.
	invalid = "configs:\n- appId: a\n  limits:\n  - {api: /a, limit: -5}\n"
)

func put(t *testing.T, srv *etcdtest.Server, key, value string) int64 {
	t.Helper()
	resp, err := srv.Client().Put(context.Background(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func newEtcd(t *testing.T, spec, cache string) source.Source {
	t.Helper()
	src, err := source.New(source.Config{Spec: spec, CacheFile: cache, Timeout: 2 * time.Second, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// TestEtcdLoadAndWatch checks that the source reads the key, with the
// mod revision as version and the format from the content; that a write
// is seen by Watch; and that an invalid value is refused with its line.
func TestEtcdLoadAndWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	rev := put(t, srv, "/gateway/rules", rulesA)
	src := newEtcd(t, srv.URL("/gateway/rules"), "")

	r, version, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Apps[0].ID != "a" || version != itoa(rev) {
		t.Errorf("Load: got app %q version %s, want a at %d", r.Apps[0].ID, version, rev)
	}
	if st := src.Status(); !st.Connected || st.Version != itoa(rev) {
		t.Errorf("Status: got %+v, want connected at version %d", st, rev)
	}

	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })

	rev = put(t, srv, "/gateway/rules", rulesB)
	eventually.True(t, wait, func() bool { return changes.Load() > 0 }, "Watch did not report the write")
	r, version, err = src.Load(context.Background())
	if err != nil || r.Apps[0].ID != "b" || version != itoa(rev) {
		t.Fatalf("Load after the write: got %v version %s, %v; want the XML rules of b at %d", r, version, err, rev)
	}

	put(t, srv, "/gateway/rules", invalid)
	_, _, err = src.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), srv.URL("/gateway/rules")+":4: limit -5 is below -1") {
		t.Errorf("Load of an invalid value: got %v, want the key and line 4", err)
	}
}

// TestEtcdCache checks that every good load writes the cache, that a
// source whose store is unreachable at start serves the cache (and fails
// clearly without one), and that it reads the store once it answers.
func TestEtcdCache(t *testing.T) {
	srv := etcdtest.Start(t)
	put(t, srv, "/gateway/rules", rulesA)
	cache := filepath.Join(t.TempDir(), "rules-cache")
	if _, _, err := newEtcd(t, srv.URL("/gateway/rules"), cache).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(cache); err != nil || string(data) != rulesA {
		t.Fatalf("cache: got %q, %v; want the value", data, err)
	}

	srv.Stop()
	if _, _, err := newEtcd(t, srv.URL("/gateway/rules"), "").Load(context.Background()); err == nil || !strings.Contains(err.Error(), "--rules-cache") {
		t.Errorf("Load without a cache, etcd down: got %v, want an error naming --rules-cache", err)
	}
	src := newEtcd(t, srv.URL("/gateway/rules"), cache)
	r, version, err := src.Load(context.Background())
	if err != nil || r.Apps[0].ID != "a" || version != "cache" || !src.Status().FromCache || src.Status().Connected {
		t.Fatalf("Load from the cache: got %v version %q status %+v, %v", r, version, src.Status(), err)
	}

	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })
	srv.Restart()
	eventually.True(t, wait, func() bool { return changes.Load() > 0 }, "Watch did not report the store's return")
	if _, version, err := src.Load(context.Background()); err != nil || version == "cache" || src.Status().FromCache {
		t.Errorf("Load after the store returned: version %q status %+v, %v", version, src.Status(), err)
	}
}

// TestEtcdReconnect checks that a running source reports a lost store,
// keeps quiet about an unchanged key, and reports the store's return so
// that the rules are read again.
func TestEtcdReconnect(t *testing.T) {
	srv := etcdtest.Start(t)
	put(t, srv, "/gateway/rules", rulesA)
	src := newEtcd(t, srv.URL("/gateway/rules"), "")
	if _, _, err := src.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })

	srv.Stop()
	eventually.True(t, wait, func() bool { return !src.Status().Connected }, "Status still connected with etcd stopped")
	if n := changes.Load(); n != 0 {
		t.Errorf("onChange calls before the store returned: got %d, want 0", n)
	}
	srv.Restart()
	eventually.True(t, wait, func() bool { return src.Status().Connected && changes.Load() > 0 }, "no reconnection reported")
}

func TestParseEtcdURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec string
		endpoints  string
		key        string
		err        string
	}{
		{name: "one", spec: "etcd://h:2379/gateway/rules", endpoints: "http://h:2379", key: "/gateway/rules"},
		{name: "several, TLS", spec: "etcds://a:1,b:2/k.yaml", endpoints: "https://a:1 https://b:2", key: "/k.yaml"},
		{name: "credentials", spec: "etcd://u:p@h:2379/k", err: "put no credentials in the URL"},
		{name: "no key", spec: "etcd://h:2379/", err: "no key"},
		{name: "no port", spec: "etcd://h/k", err: "is not host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eps, key, _, err := source.ParseEtcdURL(tt.spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("got %v, want an error with %q", err, tt.err)
				}
				if err != nil && strings.Contains(err.Error(), "u:p") {
					t.Errorf("the error shows the credentials: %v", err)
				}
				return
			}
			if got := strings.Join(eps, " "); err != nil || got != tt.endpoints || key != tt.key {
				t.Errorf("got %q %q, %v; want %q %q", got, key, err, tt.endpoints, tt.key)
			}
		})
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestEtcdUnreachableNamesEndpoints checks that when etcd does not answer,
// the error names each endpoint and what dialling it finds, rather than
// only the client's "context deadline exceeded": one endpoint refuses
// connections, the other accepts them and never answers as etcd.
func TestEtcdUnreachableNamesEndpoints(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	spec := "etcd://" + refused + "," + silent.Addr().String() + "/gateway/rules"
	src, err := source.New(source.Config{Spec: spec, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, _, err = src.Load(context.Background())
	if err == nil {
		t.Fatal("Load from no etcd: got no error")
	}
	for _, want := range []string{
		"etcd did not answer at " + refused + " (dial tcp " + refused + ": connect: connection refused)",
		silent.Addr().String() + " (accepts connections, but no etcd answer",
		"context deadline exceeded",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load error lacks %q:\n%v", want, err)
		}
	}
	if got := src.Status().Error; !strings.Contains(got, refused) {
		t.Errorf("Status().Error does not name the endpoint: %q", got)
	}
}
