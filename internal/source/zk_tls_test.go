package source_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newZKTLS(t *testing.T, spec string, auth source.ZKAuth, timeout time.Duration) source.Store {
	t.Helper()
	st, err := source.NewStore(source.Config{Spec: spec, ZK: auth, Timeout: timeout, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestZKTLS checks the source over ZooKeeper's TLS port: it reads the
// znode, sees another client's write through its watch, and writes with
// its compare-and-set and history, with digest credentials too; the
// same port refuses a client that does not speak TLS, so none of this
// went in the clear.
func TestZKTLS(t *testing.T) {
	srv := zktest.StartTLS(t, zktest.TLS{Cert: tlstest.New(t, 3001)})
	zkSet(t, srv, "/gateway/rules", rulesA)
	src := newZKTLS(t, srv.TLSURL("/gateway/rules"), source.ZKAuth{CAFile: srv.CAFile}, wait)

	r, version, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Apps[0].ID != "a" || version != "0" {
		t.Errorf("Load: got app %q version %s, want a at 0", r.Apps[0].ID, version)
	}

	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, func() { changes.Add(1) })
	v := zkSet(t, srv, "/gateway/rules", rulesB)
	eventually.True(t, wait, func() bool { return changes.Load() > 0 }, "Watch over TLS did not report the write")
	if r, version, err := src.Load(context.Background()); err != nil || r.Apps[0].ID != "b" || version != itoa(v) {
		t.Fatalf("Load after the write: got %v version %s, %v; want b at %d", r, version, err, v)
	}

	testPut(t, newZKTLS(t, srv.TLSURL("/put/rules"), source.ZKAuth{CAFile: srv.CAFile}, wait))

	// The znode written over TLS is what a plain client reads.
	data, _, err := srv.Client().Get("/put/rules")
	if err != nil || len(data) == 0 {
		t.Errorf("plain read of the znode written over TLS: got %q, %v", data, err)
	}

	// Digest credentials over TLS: the znode written with them carries
	// their ACL, which the test's unauthenticated client cannot pass.
	secure := newZKTLS(t, srv.TLSURL("/secure/rules"), source.ZKAuth{Username: "gateway", Password: "s3cret", CAFile: srv.CAFile}, wait)
	if _, err := secure.Put(context.Background(), []byte(rulesA), source.Value{Version: source.NoVersion}, 10); err != nil {
		t.Fatal(err)
	}
	if r, _, err := secure.Load(context.Background()); err != nil || r.Apps[0].ID != "a" {
		t.Errorf("Load with credentials over TLS: got %v, %v; want the rules of a", r, err)
	}
	if _, _, err := srv.Client().Get("/secure/rules"); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("unauthenticated read of the znode written with credentials: got %v, want %v", err, zk.ErrNoAuth)
	}

	plain := newZKTLS(t, "zk://"+srv.TLSAddr+"/gateway/rules", source.ZKAuth{}, 3*time.Second)
	if _, _, err := plain.Load(context.Background()); err == nil {
		t.Error("Load without TLS from the TLS port: got no error, want one")
	}
}

// errWaited is the cause of refusedContext's end.
var errWaited = errors.New("the test stopped waiting")

// refusedContext returns the context of a request that a server refuses:
// a client that waits for its own deadline (an hour) rather than failing
// once refused finds it ended, after a minute, with errWaited.
func refusedContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Minute, errWaited)
	t.Cleanup(cancel)
	return ctx
}

// TestZKTLSRefused checks that a server certificate the client cannot
// verify fails the request with the handshake's reason, naming the
// server, rather than with a bare timeout, and as soon as every server
// refused: not when the request's deadline passes.
func TestZKTLSRefused(t *testing.T) {
	srv := zktest.StartTLS(t, zktest.TLS{Cert: tlstest.New(t, 3101)})
	otherCA := writeFile(t, t.TempDir(), "other-ca.pem", tlstest.New(t, 3102).CertPEM)
	want := "zk: TLS handshake with " + srv.TLSAddr + ": tls: failed to verify certificate: x509: certificate signed by unknown authority"
	for _, tt := range []struct {
		name string
		spec string
		auth source.ZKAuth
	}{
		{name: "wrong CA", spec: srv.TLSURL("/gateway/rules"), auth: source.ZKAuth{CAFile: otherCA}},
		{name: "system roots", spec: srv.TLSURL("/gateway/rules")},
		{name: "CA with zk://", spec: "zk://" + srv.TLSAddr + "/gateway/rules", auth: source.ZKAuth{CAFile: otherCA}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := refusedContext(t)
			_, _, err := newZKTLS(t, tt.spec, tt.auth, time.Hour).Load(ctx)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Load: got %v, want %q", err, want)
			}
			// A refusal asks for the certificates, not a rules cache.
			if err != nil && (!strings.Contains(err.Error(), "check --zk-ca") || strings.Contains(err.Error(), "--rules-cache")) {
				t.Errorf("Load: got %v, want the hint to check --zk-ca, not to pass --rules-cache", err)
			}
			if context.Cause(ctx) == errWaited {
				t.Errorf("Load waited until the test gave up (%v); want it to fail once the server refused", err)
			}
		})
	}
}

// TestZKMutualTLS checks a server that requires a client certificate:
// the one it trusts is let in, none and an untrusted one are refused in
// the handshake, at once.
func TestZKMutualTLS(t *testing.T) {
	client, stranger := tlstest.New(t, 3202), tlstest.New(t, 3203)
	srv := zktest.StartTLS(t, zktest.TLS{Cert: tlstest.New(t, 3201), ClientCA: &client})
	zkSet(t, srv, "/gateway/rules", rulesA)
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		cert tlstest.Cert
		none bool
		err  string
	}{
		{name: "trusted", cert: client},
		{name: "untrusted", cert: stranger, err: "zk: TLS handshake with " + srv.TLSAddr + ": remote error: tls: bad certificate"},
		{name: "none", none: true, err: "zk: TLS handshake with " + srv.TLSAddr + ": remote error: tls: bad certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			auth := source.ZKAuth{CAFile: srv.CAFile}
			if !tt.none {
				auth.CertFile = writeFile(t, dir, tt.name+"-cert.pem", tt.cert.CertPEM)
				auth.KeyFile = writeFile(t, dir, tt.name+"-key.pem", tt.cert.KeyPEM)
			}
			timeout, ctx := wait, context.Background()
			if tt.err != "" {
				timeout, ctx = time.Hour, refusedContext(t)
			}
			r, _, err := newZKTLS(t, srv.TLSURL("/gateway/rules"), auth, timeout).Load(ctx)
			switch {
			case tt.err == "" && (err != nil || r.Apps[0].ID != "a"):
				t.Errorf("Load: got %v, %v; want the rules of a", r, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("Load: got %v, want %q", err, tt.err)
			case tt.err != "" && context.Cause(ctx) == errWaited:
				t.Errorf("Load waited until the test gave up (%v); want it to fail once the server refused", err)
			}
		})
	}
}

// TestStoreTLSFiles checks the errors of TLS files that cannot work, the
// same for ZooKeeper and etcd (one helper reads them), before any
// connection.
func TestStoreTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := tlstest.New(t, 3301)
	cert := writeFile(t, dir, "cert.pem", c.CertPEM)
	key := writeFile(t, dir, "key.pem", c.KeyPEM)
	notPEM := writeFile(t, dir, "not.pem", []byte("not a certificate\n"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		name          string
		ca, cert, key string
		err           string // with STORE for zk or etcd
	}{
		{name: "missing CA", ca: missing, err: "--STORE-ca: open " + missing + ": no such file or directory"},
		{name: "CA not PEM", ca: notPEM, err: "--STORE-ca " + notPEM + ": no PEM certificate in it"},
		{name: "cert without key", cert: cert, err: "--STORE-cert without --STORE-key"},
		{name: "key without cert", key: key, err: "--STORE-key without --STORE-cert"},
		{name: "key not PEM", cert: cert, key: notPEM, err: "--STORE-cert and --STORE-key: tls: "},
		{name: "good", ca: cert, cert: cert, key: key},
	} {
		for _, store := range []string{"zk", "etcd"} {
			t.Run(tt.name+"/"+store, func(t *testing.T) {
				t.Parallel()
				cfg := source.Config{Spec: store + "://127.0.0.1:1/gateway/rules", Timeout: time.Second}
				if store == "zk" {
					cfg.ZK = source.ZKAuth{CAFile: tt.ca, CertFile: tt.cert, KeyFile: tt.key}
				} else {
					cfg.Etcd = source.EtcdAuth{CAFile: tt.ca, CertFile: tt.cert, KeyFile: tt.key}
				}
				src, err := source.New(cfg)
				if err == nil {
					src.Close()
				}
				want := strings.ReplaceAll(tt.err, "STORE", store)
				if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
					t.Errorf("New: got %v, want %q", err, want)
				}
			})
		}
	}
}
