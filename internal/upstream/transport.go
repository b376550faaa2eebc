package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// transport is the http.Transport of a target: plain http targets share
// one, h2c targets another; a target with a tls section has its own, which checks its
// certificate against its own name. A target kept by a reload keeps its
// transport, and so its connections.
type transport struct {
	*http.Transport
	files *tlsFiles // nil without a tls section
	// dial dials a connection, before WriteBounded bounds its writes by
	// the transport's timeout.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// h2cOnly returns the protocols of a transport to h2c targets: HTTP/2
// without TLS, with prior knowledge (RFC 9113 §3.3), for http requests.
func h2cOnly() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

// tlsKey identifies TLS settings.
func tlsKey(t *config.UpstreamTLS) string {
	if t == nil {
		return ""
	}
	return "tls\x00" + t.CA + "\x00" + t.Cert + "\x00" + t.Key + "\x00" + t.ServerName
}

// newTransport returns the transport of a target on host (a name or an
// address, without the port) with the tls section t, nil for plain http.
func newTransport(t *config.UpstreamTLS, host string, cfg Config) (*transport, error) {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &transport{dial: dialer.DialContext, Transport: &http.Transport{
		Proxy:               nil, // never route through an environment proxy
		DialContext:         WriteBounded(dialer.DialContext, cfg.ResponseHeaderTimeout),
		ForceAttemptHTTP2:   true, // HTTP/2 to TLS targets that offer it (ALPN)
		MaxIdleConns:        4 * cfg.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		// A route that sets its own timeout uses a copy with it (see
		// Target.transport).
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}}
	if t == nil {
		return tr, nil
	}
	files := &tlsFiles{ca: t.CA, cert: t.Cert, key: t.Key, now: cfg.Now}
	if err := files.load(); err != nil {
		return nil, err
	}
	tc := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	name := t.ServerName
	if name == "" {
		name = host
	}
	if t.Cert != "" {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := files.current()
			return c, nil
		}
	}
	if t.CA != "" {
		// The roots are read again when the file changes, so the
		// verification is the package's own: the standard one, against
		// the current roots (crypto/tls's VerifyConnection example).
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			_, roots := files.current()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("upstream: the target sent no certificate")
			}
			// The name checked is the target's own (an IP address is sent
			// in no SNI, so cs.ServerName is empty for it).
			opts := x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	tr.TLSClientConfig, tr.files = tc, files
	return tr, nil
}

// tlsFiles are the CA and client certificate files of a tls section,
// read again when their modification time or size changes (checked at
// most once a second, at a handshake).
type tlsFiles struct {
	ca, cert, key string
	now           func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   string
	pair    *tls.Certificate
	roots   *x509.CertPool
}

// current returns the client certificate and the roots in force,
// reloading them first when the files changed. A change that does not
// load keeps what was loaded before.
func (f *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	f.mu.Lock()
	now := f.now()
	if now.Sub(f.checked) >= time.Second || now.Before(f.checked) {
		f.checked = now
		if stamp := f.stampNow(); stamp != f.stamp {
			f.mu.Unlock()
			f.load() // on error, the files in force stay
			f.mu.Lock()
		}
	}
	pair, roots := f.pair, f.roots
	f.mu.Unlock()
	if pair == nil {
		pair = &tls.Certificate{}
	}
	return pair, roots
}

// stampNow returns the modification times and sizes of the files.
func (f *tlsFiles) stampNow() string {
	s := ""
	for _, p := range []string{f.ca, f.cert, f.key} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		} else {
			s += "missing;"
		}
	}
	return s
}

// load reads the files.
func (f *tlsFiles) load() error {
	stamp := f.stampNow()
	var pair *tls.Certificate
	var roots *x509.CertPool
	if f.cert != "" {
		c, err := config.LoadKeyPair(f.cert, f.key)
		if err != nil {
			return fmt.Errorf("tls cert %s and key %s: %w", f.cert, f.key, err)
		}
		pair = &c
	}
	if f.ca != "" {
		data, err := config.ReadPEMFile(f.ca)
		if err != nil {
			return fmt.Errorf("tls ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(data) {
			return fmt.Errorf("tls ca %s holds no PEM certificate", f.ca)
		}
	}
	f.mu.Lock()
	f.pair, f.roots, f.stamp = pair, roots, stamp
	f.mu.Unlock()
	return nil
}
