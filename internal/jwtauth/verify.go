package jwtauth

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultCacheSize is how many verified tokens a Verifier remembers by
// default.
const DefaultCacheSize = 10000

var (
	errUnknownKid  = errors.New("no key in the JWKS has kid")
	errKidRequired = errors.New("the token names no kid and the JWKS has several keys for its algorithm")
	errNoKey       = errors.New("the JWKS has no key")
	errKeyAlg      = errors.New("the key's type does not match the token's algorithm")
	errSkippedKey  = errors.New("the gateway does not verify with that JWKS key")
	errAlg         = errors.New("algorithm not allowed")
	errCrit        = errors.New("its header names critical extensions (crit), which this gateway does not support")
)

// Config configures a Verifier. At least one of Keys and HMACSecret is
// required.
type Config struct {
	// Keys returns the JWKS keys in force; nil when there is no JWKS.
	// RS256, ES256 and EdDSA tokens are verified with them.
	Keys func() *KeySet
	// Refetch, if not nil, is called when a token names a kid the keys
	// in force lack, and returns a newer set to verify it with, or nil
	// (Keys.Refetch: a URL fetched again, at most once a minute).
	Refetch func(kid string) *KeySet
	// HMACSecret, when not empty, verifies HS256 tokens; without it
	// HS256 tokens are refused.
	HMACSecret []byte
	// Issuer, when not empty, is the iss a token must carry.
	Issuer string
	// Audience, when not empty, is a value the token's aud must hold.
	Audience string
	// CacheSize bounds how many verified tokens are remembered, by
	// their sha256, until they expire. 0 means DefaultCacheSize;
	// negative means no cache.
	CacheSize int
}

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	keys     func() *KeySet
	refetch  func(kid string) *KeySet
	secret   []byte
	issuer   string
	audience string
	methods  []string
	size     int

	mu    sync.RWMutex
	cache map[[sha256.Size]byte]cached
}

// cached is a verified token: valid until Claims.Expiry, as long as the
// key set it was verified against is in force.
type cached struct {
	claims *Claims
	set    *KeySet
}

// New returns a Verifier for cfg.
func New(cfg Config) (*Verifier, error) {
	if cfg.Keys == nil && len(cfg.HMACSecret) == 0 {
		return nil, errors.New("jwtauth: a JWKS or an HMAC secret is needed")
	}
	if n := len(cfg.HMACSecret); n > 0 && n < 32 {
		// RFC 7518 §3.2: an HS256 key must be at least as long as the
		// hash output.
		return nil, fmt.Errorf("jwtauth: the HMAC secret has %d bytes; HS256 needs at least 32", n)
	}
	v := &Verifier{
		keys: cfg.Keys, refetch: cfg.Refetch, secret: cfg.HMACSecret, issuer: cfg.Issuer, audience: cfg.Audience,
		size: cfg.CacheSize,
	}
	if v.size == 0 {
		v.size = DefaultCacheSize
	}
	if v.size > 0 {
		v.cache = make(map[[sha256.Size]byte]cached)
	}
	if v.keys != nil {
		v.methods = append(v.methods, RS256, ES256, EdDSA)
	}
	if len(v.secret) > 0 {
		v.methods = append(v.methods, HS256)
	}
	return v, nil
}

// Claims are the claims of a verified token. They are never modified, so
// they are safe for concurrent use.
type Claims struct {
	m jwt.MapClaims
	// Expiry is when the token expires.
	Expiry time.Time
}

// ClaimsOf returns Claims that hold the given string claims, unverified:
// for `gateway replay`, which decides logged requests by the claim values
// the live gateway verified and logged.
func ClaimsOf(values map[string]string) *Claims {
	m := make(jwt.MapClaims, len(values))
	for k, v := range values {
		m[k] = v
	}
	return &Claims{m: m}
}

// Value returns claim name as a string: a string as it is, a number as
// JSON writes it, a boolean as true or false; "" when the token lacks it
// or it is null. why says why it cannot be used (an object or a list).
func (c *Claims) Value(name string) (v, why string) {
	switch x := c.m[name].(type) {
	case nil:
		return "", ""
	case string:
		return x, ""
	case json.Number:
		return string(x), ""
	case bool:
		return strconv.FormatBool(x), ""
	}
	return "", "is not a string, a number or a boolean"
}

// Verify returns the claims of token if it is valid at now: signed by a
// key of the JWKS with that key's algorithm (RS256, ES256 or EdDSA), or
// with the HMAC secret (HS256); not expired (exp is required) nor before
// its nbf or iat; and with the configured issuer and audience. The error
// says why it is not, in words fit for the caller, never quoting the
// token.
func (v *Verifier) Verify(token string, now time.Time) (*Claims, error) {
	var set *KeySet
	if v.keys != nil {
		set = v.keys()
	}
	var sum [sha256.Size]byte
	if v.cache != nil {
		sum = sha256.Sum256([]byte(token))
		v.mu.RLock()
		c, ok := v.cache[sum]
		v.mu.RUnlock()
		if ok && c.set == set && now.Before(c.claims.Expiry) {
			return c.claims, nil
		}
	}
	claims, err := v.verify(token, set, now)
	var unknown *unknownKidError
	if errors.As(err, &unknown) && v.refetch != nil {
		if newer := v.refetch(unknown.kid); newer != nil && newer != set {
			set = newer
			claims, err = v.verify(token, set, now)
		}
	}
	if err != nil {
		return nil, err
	}
	if v.cache != nil {
		v.mu.Lock()
		if _, ok := v.cache[sum]; !ok && len(v.cache) >= v.size {
			// Random eviction: map iteration starts anywhere. Expired
			// entries go first when one is met.
			for k, c := range v.cache {
				delete(v.cache, k)
				if !now.Before(c.claims.Expiry) || len(v.cache) < v.size {
					break
				}
			}
		}
		v.cache[sum] = cached{claims: claims, set: set}
		v.mu.Unlock()
	}
	return claims, nil
}

func (v *Verifier) verify(token string, set *KeySet, now time.Time) (*Claims, error) {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.methods),
		jwt.WithJSONNumber(),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if v.issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.issuer))
	}
	if v.audience != "" {
		opts = append(opts, jwt.WithAudience(v.audience))
	}
	var m jwt.MapClaims
	var keyErr error // why the key function found no key
	t, err := jwt.NewParser(opts...).ParseWithClaims(token, &m, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			// A recipient must refuse a token whose crit names an
			// extension it does not understand (RFC 7515, section
			// 4.1.11): this one understands none.
			keyErr = errCrit
			return nil, errCrit
		}
		alg := t.Method.Alg()
		switch alg {
		case HS256:
			if len(v.secret) > 0 {
				return v.secret, nil
			}
		case RS256, ES256, EdDSA:
			if set != nil {
				kid, _ := t.Header["kid"].(string)
				k, err := set.lookup(kid, alg)
				if errors.Is(err, errUnknownKid) {
					err = &unknownKidError{kid: kid, err: err}
				}
				keyErr = err
				return k, err
			}
		}
		keyErr = errAlg
		return nil, errAlg
	})
	if err != nil {
		return nil, v.reason(t, m, err, keyErr)
	}
	exp, err := m.GetExpirationTime()
	if err != nil || exp == nil {
		return nil, errors.New("the token has no valid exp claim")
	}
	return &Claims{m: m, Expiry: exp.Time}, nil
}

// unknownKidError is the key function's error for a kid the set lacks:
// the token may be signed with a key rotated in since the set was read.
type unknownKidError struct {
	kid string
	err error
}

func (e *unknownKidError) Error() string { return e.err.Error() }
func (e *unknownKidError) Unwrap() error { return e.err }

// reason turns a parse error into what the caller is told.
// keyErr is the key function's error, if it failed.
func (v *Verifier) reason(t *jwt.Token, m jwt.MapClaims, err, keyErr error) error {
	alg := "?"
	if t != nil {
		if a, ok := t.Header["alg"].(string); ok && len(a) <= 16 {
			alg = a
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errors.New("the token is malformed")
	case keyErr != nil && keyErr != errAlg:
		return fmt.Errorf("the token cannot be verified: %w", keyErr)
	case keyErr == errAlg, errors.Is(err, jwt.ErrTokenUnverifiable),
		errors.Is(err, jwt.ErrTokenSignatureInvalid) && !v.allowed(alg):
		return fmt.Errorf("the token's algorithm %q is not allowed here", alg)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errors.New("the token's signature is invalid")
	case errors.Is(err, jwt.ErrTokenExpired):
		return errors.New("the token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return errors.New("the token is not valid yet (nbf)")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errors.New("the token is issued in the future (iat)")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Errorf("the token's issuer is not %s", v.issuer)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return fmt.Errorf("the token's audience does not include %s", v.audience)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		// Claims are checked only once the signature is: the claims
		// parsed are the signer's.
		for _, c := range []string{"exp", "iss", "aud"} {
			if _, ok := m[c]; !ok {
				return fmt.Errorf("the token has no %s claim", c)
			}
		}
	}
	return errors.New("the token is invalid")
}

func (v *Verifier) allowed(alg string) bool {
	for _, m := range v.methods {
		if m == alg {
			return true
		}
	}
	return false
}

// CacheLen returns how many verified tokens are remembered.
func (v *Verifier) CacheLen() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.cache)
}
