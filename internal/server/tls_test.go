package server

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// replaceFile writes data to a temporary file next to path and renames it
// over path, the way certificate tools (and editors) replace files.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// servedSerial opens a new TLS connection to addr offering protos by ALPN
// and returns the serial of the certificate served and the protocol
// agreed.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool, protos ...string) (serial int64, proto string) {
	t.Helper()
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second},
		Config:    &tls.Config{RootCAs: roots, NextProtos: protos},
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer c.Close()
	st := c.(*tls.Conn).ConnectionState()
	return st.PeerCertificates[0].SerialNumber.Int64(), st.NegotiatedProtocol
}

// TestTLSServesHTTP2AndReloadsCertificates serves HTTPS through Run with a
// certificate pair on disk, then replaces the pair, breaks it in two ways,
// and mends it, checking at each step the certificate that a new
// connection gets.
func TestTLSServesHTTP2AndReloadsCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first, second, third := tlstest.New(t, 1001), tlstest.New(t, 1002), tlstest.New(t, 1003)
	roots := x509.NewCertPool()
	for _, c := range []tlstest.Cert{first, second, third} {
		roots.AddCert(c.Cert)
	}
	replaceFile(t, certFile, first.CertPEM)
	replaceFile(t, keyFile, first.KeyPEM)
	g := startLive(t, func(c *Config) { c.TLSCert, c.TLSKey = certFile, keyFile })

	// HTTP/2 by ALPN, through the proxy to the upstream.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+g.proxy+"/v1/user", nil)
	req.Header.Set("X-App-Id", "app-1")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || resp.ProtoMajor != 2 {
		t.Errorf("HTTPS request: got %d %q over %s, want 200 \"ok\" over HTTP/2", resp.StatusCode, body, resp.Proto)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != first.Serial {
		t.Errorf("served certificate: got serial %d, want %d", got, first.Serial)
	}
	// HTTP/1.1 clients are served too, and nothing below TLS 1.2.
	if _, proto := servedSerial(t, g.proxy, roots, "http/1.1"); proto != "http/1.1" {
		t.Errorf("ALPN for an HTTP/1.1 client: got %q, want http/1.1", proto)
	}
	old := &tls.Dialer{Config: &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS11}}
	if c, err := old.Dial("tcp", g.proxy); err == nil {
		c.Close()
		t.Errorf("a TLS 1.1 client was served; want TLS 1.2 at least")
	}

	// want checks the certificate of a new connection.
	want := func(step string, c tlstest.Cert) {
		t.Helper()
		if got, proto := servedSerial(t, g.proxy, roots, "h2", "http/1.1"); got != c.Serial || proto != "h2" {
			t.Errorf("%s: new connection got serial %d over %q, want %d over h2", step, got, proto, c.Serial)
		}
	}
	serial := func(c tlstest.Cert) string { return strconv.FormatInt(c.Serial, 10) }

	// A new pair, each file renamed over the old: it is served without a
	// restart.
	mark := g.logs.mark()
	replaceFile(t, keyFile, second.KeyPEM)
	replaceFile(t, certFile, second.CertPEM)
	g.logs.waitFor(t, mark, "tls certificate reloaded", "serial", serial(second))
	want("after replacing the pair", second)

	// Half a pair: the third certificate next to the second's key. The
	// reload fails and the second pair is still served.
	mark = g.logs.mark()
	replaceFile(t, certFile, third.CertPEM)
	g.logs.waitFor(t, mark, "tls certificate reload failed; keeping the certificate in force", "serial", serial(second))
	want("after a certificate without its key", second)

	// A key file that is not PEM: the same.
	mark = g.logs.mark()
	replaceFile(t, keyFile, []byte("-----BEGIN PRIVATE KEY-----\nnot base64\n"))
	g.logs.waitFor(t, mark, "tls certificate reload failed; keeping the certificate in force", "serial", serial(second))
	want("after a bad key file", second)

	// The key that completes the pair: the third certificate is served.
	mark = g.logs.mark()
	replaceFile(t, keyFile, third.KeyPEM)
	g.logs.waitFor(t, mark, "tls certificate reloaded", "serial", serial(third))
	want("after completing the pair", third)
}

// TestTLSReloadsOnSIGHUP checks that SIGHUP reloads the certificate pair
// as well as the rules. The files do not change, so the watchers are
// silent and only SIGHUP can have caused the reload that is logged.
func TestTLSReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c := tlstest.New(t, 2001)
	replaceFile(t, certFile, c.CertPEM)
	replaceFile(t, keyFile, c.KeyPEM)
	g := startLive(t, func(c *Config) { c.TLSCert, c.TLSKey = certFile, keyFile })

	mark := g.logs.mark()
	// What SIGHUP does (cmd/gateway calls it).
	if err := g.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	g.logs.waitFor(t, mark, "tls certificate unchanged", "serial", "2001")
}
