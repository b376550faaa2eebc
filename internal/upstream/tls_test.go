package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// mtlsServer starts an HTTPS upstream with HTTP/2 that requires a client
// certificate signed by client. It answers the protocol and the client
// certificate's serial number.
func mtlsServer(t *testing.T, server, client tlstest.Cert) *httptest.Server {
	t.Helper()
	pair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AddCert(client.Cert)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto+" "+r.TLS.PeerCertificates[0].SerialNumber.String())
	}))
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cas}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func body(t *testing.T, p http.RoundTripper, base string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/x", nil)
	resp, err := p.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestMutualTLSAndHTTP2(t *testing.T) {
	t.Parallel()
	server, client, other := tlstest.New(t, 101), tlstest.New(t, 102), tlstest.New(t, 103)
	s := mtlsServer(t, server, client)
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// The roots are first another certificate's: the upstream is not
	// trusted until the file is fixed.
	writeFile(t, ca, other.CertPEM)
	writeFile(t, cert, client.CertPEM)
	writeFile(t, key, client.KeyPEM)
	c := newClock()
	reg := newRegistry(t, c)
	set, err := reg.Build([]config.Upstream{{Name: "tls", Targets: []config.Target{{URL: mustURL(t, s.URL), Weight: 1}},
		TLS: &config.UpstreamTLS{CA: ca, Cert: cert, Key: key}}})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Pool("tls")
	if got, err := body(t, p, s.URL); err == nil {
		t.Fatalf("got %q from an upstream whose certificate is not in the CA file, want an error", got)
	}
	writeFile(t, ca, server.CertPEM)
	c.Add(2 * time.Second) // the files are looked at again at most once a second
	got, err := body(t, p, s.URL)
	if err != nil {
		t.Fatalf("after the CA file was fixed: %v", err)
	}
	if want := "HTTP/2.0 102"; got != want {
		t.Errorf("got %q, want %q: HTTP/2 with the client certificate", got, want)
	}

	// Without a client certificate the upstream refuses the handshake.
	set2, err := reg.Build([]config.Upstream{{Name: "nocert", Targets: []config.Target{{URL: mustURL(t, s.URL), Weight: 1}},
		TLS: &config.UpstreamTLS{CA: ca}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := body(t, set2.Pool("nocert"), s.URL); err == nil {
		t.Errorf("got %q without a client certificate, want an error", got)
	}
}

func TestServerNameIsChecked(t *testing.T) {
	t.Parallel()
	server, client := tlstest.New(t, 201), tlstest.New(t, 202)
	s := mtlsServer(t, server, client)
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, ca, server.CertPEM)
	writeFile(t, cert, client.CertPEM)
	writeFile(t, key, client.KeyPEM)
	tests := []struct {
		name, serverName string
		ok               bool
	}{
		{name: "the target's address", ok: true},
		{name: "a name in the certificate", serverName: "localhost", ok: true},
		{name: "a name not in it", serverName: "billing.internal", ok: false},
	}
	for _, tt := range tests {
		reg := newRegistry(t, nil)
		set, err := reg.Build([]config.Upstream{{Name: "tls", Targets: []config.Target{{URL: mustURL(t, s.URL), Weight: 1}},
			TLS: &config.UpstreamTLS{CA: ca, Cert: cert, Key: key, ServerName: tt.serverName}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = body(t, set.Pool("tls"), s.URL)
		if (err == nil) != tt.ok {
			t.Errorf("%s: got %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// An upgrade to a TLS target that offers HTTP/2 goes over HTTP/1.1, the
// only protocol an upgrade has.
func TestUpgradeToAnHTTP2Target(t *testing.T) {
	t.Parallel()
	server := tlstest.New(t, 401)
	pair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, r.Proto)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
	}))
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	s.StartTLS()
	t.Cleanup(s.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writeFile(t, ca, server.CertPEM)
	reg := newRegistry(t, nil)
	set, err := reg.Build([]config.Upstream{{Name: "h2", Targets: []config.Target{{URL: mustURL(t, s.URL), Weight: 1}},
		TLS: &config.UpstreamTLS{CA: ca}}})
	if err != nil {
		t.Fatal(err)
	}
	p := set.Pool("h2")
	if got, err := body(t, p, s.URL); err != nil || got != "HTTP/2.0" {
		t.Fatalf("a plain request: got %q, %v; want HTTP/2.0", got, err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("got %d with a %T body, want 101 with an io.ReadWriteCloser", resp.StatusCode, resp.Body)
	}
	defer rw.Close()
	rw.Write([]byte("hi\n"))
	buf := make([]byte, 8)
	n, _ := io.ReadFull(rw, buf)
	if string(buf[:n]) != "echo hi\n" {
		t.Errorf("got %q through the upgraded connection, want %q", buf[:n], "echo hi\n")
	}
}
