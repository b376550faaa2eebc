// Package jwttest makes signing keys, JWKS documents and signed tokens for
// tests of verified callers.
//
// Its RSA keys are fixed and checked in (rsa_keys.pem), so that tests do
// not spend their time generating them. It must not be imported by code
// the gateway runs: those keys are public, and so sign nothing real.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Key is a signing key with its kid and algorithm.
type Key struct {
	Kid     string
	Alg     string // RS256, ES256 or EdDSA
	Private crypto.Signer
}

// rsaPEM holds fixed 2048-bit RSA keys, generated once with
// `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048` and
// checked in: generating one takes a noticeable time on a loaded machine.
// They sign test tokens only and protect nothing.
//
//go:embed rsa_keys.pem
var rsaPEM []byte

// rsaKeys gives each kid one of the fixed keys, in the order the kids are
// first asked for, so that different kids have different keys within a
// test binary.
var (
	rsaMu   sync.Mutex
	rsaKeys = map[string]*rsa.PrivateKey{}
	rsaPool []*rsa.PrivateKey
)

// RSA returns a 2048-bit RSA key for RS256, the same for the same kid and
// a different one for another kid within a test binary. The keys are
// fixed (rsa_keys.pem); a binary may use as many kids as the file holds
// keys.
func RSA(t testing.TB, kid string) *Key {
	t.Helper()
	rsaMu.Lock()
	defer rsaMu.Unlock()
	k, ok := rsaKeys[kid]
	if !ok {
		if rsaPool == nil {
			pool, err := parseRSAKeys(rsaPEM)
			if err != nil {
				t.Fatal(err)
			}
			rsaPool = pool
		}
		if len(rsaKeys) >= len(rsaPool) {
			t.Fatalf("jwttest: kid %q would be the %dth RSA kid of this test binary, but rsa_keys.pem holds %d keys: add one", kid, len(rsaKeys)+1, len(rsaPool))
		}
		k = rsaPool[len(rsaKeys)]
		rsaKeys[kid] = k
	}
	return &Key{Kid: kid, Alg: "RS256", Private: k}
}

// parseRSAKeys reads the PKCS #8 RSA private keys of b, in order.
func parseRSAKeys(b []byte) ([]*rsa.PrivateKey, error) {
	var keys []*rsa.PrivateKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("jwttest: rsa_keys.pem, key %d: %w", len(keys)+1, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("jwttest: rsa_keys.pem, key %d: a %T, not an RSA key", len(keys)+1, k)
		}
		keys = append(keys, rk)
	}
	if len(keys) == 0 {
		return nil, errors.New("jwttest: rsa_keys.pem holds no key")
	}
	return keys, nil
}

// EC returns a new P-256 key for ES256.
func EC(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Kid: kid, Alg: "ES256", Private: k}
}

// Ed returns a new Ed25519 key for EdDSA.
func Ed(t testing.TB, kid string) *Key {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{Kid: kid, Alg: "EdDSA", Private: k}
}

// JWK returns k's public key as a JSON Web Key.
func (k *Key) JWK() map[string]string {
	b64 := base64.RawURLEncoding.EncodeToString
	m := map[string]string{"kid": k.Kid, "use": "sig", "alg": k.Alg}
	switch p := k.Private.Public().(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", b64(p.N.Bytes()), b64(big.NewInt(int64(p.E)).Bytes())
	case *ecdsa.PublicKey:
		raw, err := p.Bytes()
		if err != nil {
			panic(err)
		}
		m["kty"], m["crv"], m["x"], m["y"] = "EC", "P-256", b64(raw[1:33]), b64(raw[33:])
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", b64(p)
	}
	return m
}

// JWKS returns a JWK Set document of the keys' public halves.
func JWKS(keys ...*Key) []byte {
	doc := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	for _, k := range keys {
		doc.Keys = append(doc.Keys, k.JWK())
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

// Sign returns a token of claims signed by k, with k's kid.
func (k *Key) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(k.Alg), claims)
	tok.Header["kid"] = k.Kid
	s, err := tok.SignedString(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SignHS256 returns a token of claims signed with secret by HS256.
func SignHS256(t testing.TB, secret []byte, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Claims returns the claims of a token valid from now - 1m to now + ttl,
// with sub and the extra claims given as name, value pairs.
func Claims(now time.Time, ttl time.Duration, sub string, extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(ttl).Unix()}
	for i := 0; i+1 < len(extra); i += 2 {
		c[extra[i].(string)] = extra[i+1]
	}
	return c
}
