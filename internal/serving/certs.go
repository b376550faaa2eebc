package serving

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// CertReloader holds the certificate pair a listener serves (the proxy
// port of `serve`, the gRPC port of `rls`) and reloads it from disk. It is safe for concurrent use; readers get an immutable
// *tls.Certificate that a reload replaces, never mutates.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu   sync.Mutex // serializes reloads
	cert atomic.Pointer[tls.Certificate]
}

// NewCertReloader loads the pair at certFile and keyFile. Unlike a reload,
// it fails when the pair does not load: the gateway must not start without
// a certificate.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	c := &CertReloader{certFile: certFile, keyFile: keyFile, log: log}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cert.Store(cert)
	log.Info("tls certificate loaded", certAttrs(cert)...)
	return c, nil
}

func (c *CertReloader) load() (*tls.Certificate, error) {
	// tls.X509KeyPair (in LoadKeyPair) checks that the key matches the
	// certificate, which is what catches a pair caught half-written (a
	// new certificate next to the old key).
	cert, err := config.LoadKeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	return &cert, nil
}

// Reload reads the pair again and, if it loads and differs from the pair
// in force, swaps it in; new TLS handshakes use it, connections already
// open keep theirs. On error the pair in force stays, and the error is
// logged: the next change of either file tries again.
func (c *CertReloader) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cert, err := c.load()
	if err != nil {
		old := c.cert.Load()
		c.log.Error("tls certificate reload failed; keeping the certificate in force",
			append([]any{"err", err}, certAttrs(old)...)...)
		return err
	}
	if sameChain(cert, c.cert.Load()) {
		c.log.Debug("tls certificate unchanged", certAttrs(cert)...)
		return nil
	}
	c.cert.Store(cert)
	c.log.Info("tls certificate reloaded", certAttrs(cert)...)
	return nil
}

// GetCertificate returns the pair in force, for tls.Config.
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cert.Load(), nil
}

// Watch reloads the pair whenever either file changes until ctx is done.
// It watches each file's directory through watch.Watcher, so that it
// follows files replaced by a rename and Kubernetes Secret volumes (a
// "..data" symlink swapped atomically). The returned function stops the
// watchers.
func (c *CertReloader) Watch(ctx context.Context) (stop func(), err error) {
	var ws []*watch.Watcher
	stop = func() {
		for _, w := range ws {
			w.Close()
		}
	}
	log := c.log.With("watching", "tls certificate")
	for _, path := range []string{c.certFile, c.keyFile} {
		w, err := watch.New(watch.Config{
			Path:     path,
			OnChange: func() { c.Reload() },
			Logger:   log,
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("watching %s: %w", path, err)
		}
		ws = append(ws, w)
		go w.Run(ctx)
	}
	return stop, nil
}

// TLSConfig returns a server TLS configuration with the certificate from
// c: TLS 1.2 at least (RFC 8996 deprecates 1.0 and 1.1; RFC 9113 §9.2
// requires 1.2 for HTTP/2), offering protos by ALPN in that order.
func (c *CertReloader) TLSConfig(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     protos,
		GetCertificate: c.GetCertificate,
	}
}

// sameChain reports whether a and b hold the same certificate chain.
func sameChain(a, b *tls.Certificate) bool {
	if a == nil || b == nil || len(a.Certificate) != len(b.Certificate) {
		return false
	}
	for i := range a.Certificate {
		if !bytes.Equal(a.Certificate[i], b.Certificate[i]) {
			return false
		}
	}
	return true
}

// certAttrs are the log attributes that identify cert.
func certAttrs(cert *tls.Certificate) []any {
	if cert == nil || cert.Leaf == nil {
		return nil
	}
	return []any{
		"subject", cert.Leaf.Subject.String(),
		"serial", cert.Leaf.SerialNumber.String(),
		"not_after", cert.Leaf.NotAfter,
	}
}
