package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// upstreamTLS reads an upstream's tls section and checks that its files
// load.
func (p *parser) upstreamTLS(f field, u *Upstream) (*UpstreamTLS, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.wrongType(f, p.word("a mapping", "an object")+" of ca, cert, key and serverName")
		return nil, false
	}
	t := &UpstreamTLS{Line: f.line}
	fs := p.fields(f.val, "tls", tlsFields)
	ok := true
	get := func(name string) (string, int) {
		g, set := fs[name]
		if !set {
			return "", 0
		}
		s, good := p.str(g)
		if !good {
			ok = false
		}
		return s, g.line
	}
	var caLine, certLine, keyLine int
	t.CA, caLine = get("ca")
	t.Cert, certLine = get("cert")
	t.Key, keyLine = get("key")
	t.ServerName, _ = get("serverName")
	if !ok {
		return t, false
	}
	if len(u.Targets) > 0 && u.Targets[0].URL.Scheme != "https" {
		p.errorf(f.line, "tls is set but the targets are %s; use https targets, or remove tls", u.Targets[0].URL.Scheme)
		ok = false
	}
	if t.CA != "" {
		if err := checkCAFile(t.CA); err != nil {
			p.errorf(caLine, "tls ca: %s", err)
			ok = false
		}
	}
	switch {
	case (t.Cert == "") != (t.Key == ""):
		line := max(certLine, keyLine)
		p.errorf(line, "tls needs both cert and key for a client certificate, or neither")
		ok = false
	case t.Cert != "":
		if _, err := LoadKeyPair(t.Cert, t.Key); err != nil {
			p.errorf(certLine, "tls cert %s and key %s do not load: %s", t.Cert, t.Key, err)
			ok = false
		}
	}
	_ = keyLine
	return t, ok
}

// MaxPEMBytes is the largest CA, certificate or key file read.
const MaxPEMBytes = 1 << 20

// ReadPEMFile reads a CA, certificate or key file: a regular file of at
// most MaxPEMBytes, so that a rule file naming /dev/zero, a FIFO or a
// huge file cannot hang or exhaust the gateway that loads it.
func ReadPEMFile(path string) ([]byte, error) {
	return safefile.Read(path, MaxPEMBytes)
}

// LoadKeyPair loads a certificate and its key with ReadPEMFile.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := ReadPEMFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ReadPEMFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// checkCAFile checks that path is a PEM file of at least one
// certificate.
func checkCAFile(path string) error {
	data, err := ReadPEMFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}
