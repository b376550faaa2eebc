package source

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"iter"
	"net"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// clientTLS returns the TLS configuration of a store's client from its
// PEM files: ca verifies the servers' certificates (the system roots when
// empty); cert and key, both or neither, are a client certificate for
// mutual TLS. store names the flags in errors: "etcd" for --etcd-ca,
// "zk" for --zk-ca. The server name is left empty: each server is
// verified under the host of its own address.
func clientTLS(store, ca, cert, key string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := config.ReadPEMFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--%s-ca: %w", store, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--%s-ca %s: no PEM certificate in it", store, ca)
		}
	}
	switch {
	case cert != "" && key == "":
		return nil, fmt.Errorf("--%s-cert without --%s-key: pass the client certificate's private key too", store, store)
	case cert == "" && key != "":
		return nil, fmt.Errorf("--%s-key without --%s-cert: pass the client certificate too", store, store)
	case cert != "":
		pair, err := config.LoadKeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--%s-cert and --%s-key: %w", store, store, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// attempt is how a connection attempt went.
type attempt uint8

const (
	connected attempt = iota
	failed
	// refused: a TLS handshake that a certificate failed, the server's,
	// which the client could not verify, or the client's, which the
	// server refused with an alert. Trying that server again fails the
	// same way.
	refused
)

func attemptOf(err error) attempt {
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case err == nil:
		return connected
	case errors.As(err, &verify), errors.As(err, &op) && op.Op == "remote error":
		return refused
	}
	return failed
}

// noneLetIn reports whether tries, the last attempt at each address of a
// store, let no client in and one at least refused a certificate: a
// request then fails at once rather than wait for a server that will
// refuse it again. Addresses merely down alone leave it waiting.
func noneLetIn(tries iter.Seq[attempt]) bool {
	some := false
	for a := range tries {
		if a == connected {
			return false
		}
		some = some || a == refused
	}
	return some
}

// serverTLS returns tc for a connection to addr: its certificate is
// verified under addr's host, as the stores' clients do.
func serverTLS(tc *tls.Config, addr string) *tls.Config {
	host, _, _ := net.SplitHostPort(addr)
	tc = tc.Clone()
	tc.ServerName = host
	return tc
}
