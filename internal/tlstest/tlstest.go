// Package tlstest makes self-signed certificates for tests, so that no key
// is checked in.
//
// It is for tests only and must not be imported by code the gateway runs.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strconv"
	"testing"
	"time"
)

// Cert is a self-signed certificate for 127.0.0.1 and localhost, valid for
// an hour either side of its making, and its own root: add Cert to a
// client's pool to trust it. It serves as a server's or as a client's
// certificate (mutual TLS): Java's TLS servers, ZooKeeper's among them,
// refuse a client certificate whose extended key usage lacks client
// authentication.
type Cert struct {
	Serial int64
	Cert   *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its PKCS #8 key in PEM.
	CertPEM, KeyPEM []byte
}

// New returns a new Cert with the given serial number.
func New(t testing.TB, serial int64) Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "gateway test " + strconv.FormatInt(serial, 10)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{
		Serial:  serial,
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}
