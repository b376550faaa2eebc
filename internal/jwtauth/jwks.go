// Package jwtauth verifies the JSON Web Tokens (RFC 7519) that identify
// callers: signatures are checked by github.com/golang-jwt/jwt/v5 against
// the keys of a JWKS (RFC 7517), read from a file or a URL and kept fresh,
// or an HS256 secret. See docs/security.md, "Verified callers (JWT)".
//
// It only verifies tokens and returns their claims: it must not read or
// change the request, nor decide limits; which claim identifies a caller
// is the caller's choice.
package jwtauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// The algorithms a token may be signed with (RFC 7518 §3.1, RFC 8037 §3.1):
// each JWKS key verifies exactly one of them, chosen by its key type, and
// HS256 is verified only with the secret file.
const (
	RS256 = "RS256"
	ES256 = "ES256"
	EdDSA = "EdDSA"
	HS256 = "HS256"
)

// minRSABits is the smallest RSA modulus accepted (RFC 7518 §3.3 requires
// 2048 bits).
const minRSABits = 2048

// Key is one verification key of a KeySet.
type Key struct {
	// ID is the key's kid ("" if it has none).
	ID string
	// Alg is the one algorithm the key verifies: RS256, ES256 or EdDSA.
	Alg string
	// Public is an *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey.
	Public crypto.PublicKey
}

// KeySet is a parsed JWKS. It is never modified once ParseJWKS returns it,
// so it is safe for concurrent use.
type KeySet struct {
	keys []Key
	// skipped are the signing keys the gateway does not verify with,
	// each described for the log; skippedKid holds their kids.
	skipped    []string
	skippedKid map[string]string // kid → the key's algorithm or type
}

// Len returns how many keys the set holds.
func (s *KeySet) Len() int { return len(s.keys) }

// Skipped describes the signing keys of the JWKS that the gateway does not
// verify with (an algorithm other than RS256, ES256 and EdDSA, a key type
// or curve of none of them, or an RSA key of fewer than 2048 bits), in
// the order of the set: `kid "k2"
// (RSA, alg PS256)`. They are left out of the set; the others are used.
func (s *KeySet) Skipped() []string { return s.skipped }

// lookup returns the key that verifies a token with header kid and alg:
// the key with that kid, or, when the token names none, the set's only key
// for alg. The key's algorithm must be alg, so that a key is never used
// with an algorithm other than its own (an RSA public key as an HMAC
// secret, say).
func (s *KeySet) lookup(kid, alg string) (crypto.PublicKey, error) {
	var found *Key
	for i := range s.keys {
		k := &s.keys[i]
		if kid != "" {
			if k.ID == kid {
				found = k
				break
			}
			continue
		}
		if k.Alg == alg {
			if found != nil {
				return nil, errKidRequired
			}
			found = k
		}
	}
	switch {
	case found == nil && s.skippedKid[kid] != "":
		return nil, fmt.Errorf("%w: key %s is for %s", errSkippedKey, quoteKid(kid), s.skippedKid[kid])
	case found == nil && kid != "":
		return nil, fmt.Errorf("%w %s", errUnknownKid, quoteKid(kid))
	case found == nil:
		return nil, fmt.Errorf("%w for %s", errNoKey, alg)
	case found.Alg != alg:
		return nil, fmt.Errorf("%w: key %s is for %s, the token says %s", errKeyAlg, quoteKid(kid), found.Alg, alg)
	}
	return found.Public, nil
}

// quoteKid quotes a kid from a token for a message, cut to 64 bytes: it
// comes from the caller.
func quoteKid(kid string) string {
	if len(kid) > 64 {
		return strconv.Quote(kid[:64]) + "…"
	}
	return strconv.Quote(kid)
}

// jwk is the part of a JSON Web Key (RFC 7517 §4, RFC 7518 §6, RFC 8037
// §2) that the gateway reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// ParseJWKS parses a JWK Set: {"keys": [...]}. Keys for encryption (use
// "enc") are left out; so are signing keys the gateway does not verify
// with — an alg other than RS256, ES256 and EdDSA (PS256, RS384, ES384…),
// a key type or curve of none of them, an RSA key of fewer than 2048
// bits — which Skipped lists: an identity
// provider may publish them beside the keys the gateway uses, and they
// must not keep those out. A key of one of those three algorithms that
// is malformed, whose alg disagrees with its type (HS256 on any key), or
// whose kid repeats another's, is an error, as is a set left with no key,
// so that a half-broken set never replaces a good one.
func ParseJWKS(data []byte) (*KeySet, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parsing the JWKS: %w", err)
	}
	set := &KeySet{}
	seen := map[string]bool{}
	for i, raw := range doc.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if what := k.unverified(); what != "" {
			set.skip(i, k.Kid, what)
			continue
		}
		key, err := k.parse()
		var weak weakKeyError
		if errors.As(err, &weak) {
			// Too weak to trust, yet well formed: a provider may still
			// publish it beside its new keys while it rotates.
			set.skip(i, k.Kid, weak.Error())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("JWKS key %d (kid %s): %w", i, quoteKid(k.Kid), err)
		}
		if k.Kid != "" {
			if seen[k.Kid] {
				return nil, fmt.Errorf("JWKS key %d: kid %s is used twice", i, quoteKid(k.Kid))
			}
			seen[k.Kid] = true
		}
		set.keys = append(set.keys, key)
	}
	for kid := range set.skippedKid {
		if seen[kid] {
			delete(set.skippedKid, kid) // the kid names a key the gateway uses
		}
	}
	if len(set.keys) == 0 {
		msg := "the JWKS holds no RSA, P-256 or Ed25519 signing key (RS256, ES256, EdDSA)"
		if len(set.skipped) > 0 {
			msg += "; skipped: " + JoinSkipped(set.skipped)
		}
		return nil, errors.New(msg)
	}
	return set, nil
}

// maxSkippedShown is how many skipped keys a message names: a JWKS of a
// megabyte can hold tens of thousands, and one log line must not.
const maxSkippedShown = 8

// JoinSkipped joins descriptions of skipped keys (KeySet.Skipped) for a
// message, naming at most maxSkippedShown of them and counting the rest.
func JoinSkipped(skipped []string) string {
	if len(skipped) <= maxSkippedShown {
		return strings.Join(skipped, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(skipped[:maxSkippedShown], ", "), len(skipped)-maxSkippedShown)
}

// weakKeyError is the error of an RSA key whose modulus is too short.
type weakKeyError struct{ bits int }

func (e weakKeyError) Error() string {
	return fmt.Sprintf("RSA, %d-bit modulus, fewer than the %d RFC 7518 requires", e.bits, minRSABits)
}

// skip notes the i-th key, of kid, as one the gateway does not verify
// with.
func (s *KeySet) skip(i int, kid, what string) {
	if kid == "" {
		s.skipped = append(s.skipped, fmt.Sprintf("key %d (%s)", i, what))
		return
	}
	s.skipped = append(s.skipped, fmt.Sprintf("kid %s (%s)", quoteKid(kid), what))
	if s.skippedKid == nil {
		s.skippedKid = map[string]string{}
	}
	if _, ok := s.skippedKid[kid]; !ok {
		s.skippedKid[kid] = what
	}
}

// verified are the algorithm each key type and curve verifies.
var verified = map[string]string{"RSA": RS256, "EC/P-256": ES256, "OKP/Ed25519": EdDSA}

// typ returns k's type and, for EC and OKP keys, its curve: "EC/P-256".
func (k *jwk) typ() string {
	if k.Kty == "EC" || k.Kty == "OKP" {
		return k.Kty + "/" + k.Crv
	}
	return k.Kty
}

// unverified describes k when the gateway does not verify with it ("RSA,
// alg PS256"), and returns "" for a key of RS256, ES256 or EdDSA.
func (k *jwk) unverified() string {
	alg, ok := verified[k.typ()]
	switch {
	case !ok && k.Alg != "":
		return fmt.Sprintf("%s, alg %s", k.typ(), cut(k.Alg))
	case !ok:
		return cut(k.typ())
	case k.Alg == "" || k.Alg == alg:
		return ""
	case k.Alg == HS256 || k.Alg == RS256 || k.Alg == ES256 || k.Alg == EdDSA:
		return "" // an algorithm of another type: parse reports it
	}
	return fmt.Sprintf("%s, alg %s", k.typ(), cut(k.Alg))
}

// cut cuts a string from a JWKS to 32 bytes for a message.
func cut(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + "…"
	}
	return s
}

// parse returns k, a key of a type and curve the gateway verifies with
// (unverified is ""), as a Key.
func (k *jwk) parse() (key Key, err error) {
	key.ID = k.Kid
	switch {
	case k.Kty == "RSA":
		key.Alg = RS256
		n, err := b64Int(k.N)
		if err != nil {
			return key, fmt.Errorf("n: %w", err)
		}
		e, err := b64Int(k.E)
		if err != nil {
			return key, fmt.Errorf("e: %w", err)
		}
		switch {
		case n.Sign() == 0:
			return key, errors.New("the RSA modulus is zero")
		case n.BitLen() < minRSABits:
			return key, weakKeyError{bits: n.BitLen()}
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return key, errors.New("the RSA exponent is not an odd number from 3 to 2^31-1")
		}
		key.Public = &rsa.PublicKey{N: n, E: int(e.Int64())}
	case k.Kty == "EC" && k.Crv == "P-256":
		key.Alg = ES256
		x, err := b64Fixed(k.X, 32)
		if err != nil {
			return key, fmt.Errorf("x: %w", err)
		}
		y, err := b64Fixed(k.Y, 32)
		if err != nil {
			return key, fmt.Errorf("y: %w", err)
		}
		// ParseUncompressedPublicKey checks that the point is on the curve.
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return key, err
		}
		key.Public = pub
	case k.Kty == "OKP" && k.Crv == "Ed25519":
		key.Alg = EdDSA
		x, err := b64Fixed(k.X, ed25519.PublicKeySize)
		if err != nil {
			return key, fmt.Errorf("x: %w", err)
		}
		key.Public = ed25519.PublicKey(x)
	default:
		return key, fmt.Errorf("a %s key is not verified with", k.typ())
	}
	if k.Alg != "" && k.Alg != key.Alg {
		return key, fmt.Errorf("alg %s does not go with a %s key: it verifies %s only", k.Alg, k.Kty, key.Alg)
	}
	return key, nil
}

func b64Int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	return new(big.Int).SetBytes(b), nil
}

func b64Fixed(s string, n int) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), n)
	}
	return b, nil
}
