package source_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// TestEtcdTLS checks an etcd that serves TLS and requires a client
// certificate: the client it trusts reads and writes the rules; a server
// certificate the client cannot verify, and a client certificate the
// server refuses or none, fail the request with the handshake's reason,
// naming the endpoint, as soon as the endpoints are probed rather than
// when the request's deadline passes.
func TestEtcdTLS(t *testing.T) {
	client, stranger := tlstest.New(t, 5102), tlstest.New(t, 5103)
	srv := etcdtest.StartTLS(t, etcdtest.TLS{Cert: tlstest.New(t, 5101), ClientCA: &client})
	put(t, srv, "/gateway/rules", rulesA)
	dir := t.TempDir()
	otherCA := writeFile(t, dir, "other-ca.pem", tlstest.New(t, 5104).CertPEM)
	files := func(c tlstest.Cert, name string) (string, string) {
		return writeFile(t, dir, name+"-cert.pem", c.CertPEM), writeFile(t, dir, name+"-key.pem", c.KeyPEM)
	}
	cert, key := files(client, "client")
	scert, skey := files(stranger, "stranger")

	t.Run("trusted", func(t *testing.T) {
		store := func(k string) source.Store {
			st, err := source.NewStore(source.Config{Spec: srv.URL(k), Etcd: source.EtcdAuth{CAFile: srv.CAFile, CertFile: cert, KeyFile: key}, Timeout: wait})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
		r, _, err := store("/gateway/rules").Load(context.Background())
		if err != nil || r.Apps[0].ID != "a" {
			t.Fatalf("Load: got %v, %v; want the rules of a", r, err)
		}
		testPut(t, store("/gateway/written"))
	})
	refused := "etcd refused the connection at " + srv.Addr + " (TLS handshake: "
	for _, tt := range []struct {
		name string
		auth source.EtcdAuth
		err  string
	}{
		{name: "wrong CA", auth: source.EtcdAuth{CAFile: otherCA, CertFile: cert, KeyFile: key}, err: refused + "tls: failed to verify certificate: x509: certificate signed by unknown authority)"},
		{name: "untrusted client", auth: source.EtcdAuth{CAFile: srv.CAFile, CertFile: scert, KeyFile: skey}, err: refused + "remote error: tls: bad certificate)"},
		{name: "no client certificate", auth: source.EtcdAuth{CAFile: srv.CAFile}, err: refused + "remote error: tls: bad certificate)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := source.NewStore(source.Config{Spec: srv.URL("/gateway/rules"), Etcd: tt.auth, Timeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := refusedContext(t)
			_, _, err = st.Load(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Load: got %v, want %q", err, tt.err)
			}
			if err != nil && (!strings.Contains(err.Error(), "check --etcd-ca") || strings.Contains(err.Error(), "--rules-cache")) {
				t.Errorf("Load: got %v, want the hint to check --etcd-ca, not to pass --rules-cache", err)
			}
			if context.Cause(ctx) == errWaited {
				t.Errorf("Load waited until the test gave up (%v); want it to fail once the server refused", err)
			}
			_, err = st.Get(refusedContext(t))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Get: got %v, want %q", err, tt.err)
			}
		})
	}
	// An endpoint that is merely down is no refusal: the request waits
	// for its deadline, and says what the endpoints do.
	t.Run("down", func(t *testing.T) {
		st, err := source.NewStore(source.Config{Spec: "etcds://127.0.0.1:1/gateway/rules", Etcd: source.EtcdAuth{CAFile: srv.CAFile}, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		_, _, err = st.Load(context.Background())
		want := "etcd did not answer at 127.0.0.1:1 (dial tcp 127.0.0.1:1: connect: connection refused)"
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Load: got %v, want %q after the deadline", err, want)
		}
		// A store that is down may come back: the first load's error
		// points to the rules cache.
		if err != nil && !strings.Contains(err.Error(), "pass --rules-cache FILE") {
			t.Errorf("Load: got %v, want the hint to pass --rules-cache", err)
		}
	})
}
