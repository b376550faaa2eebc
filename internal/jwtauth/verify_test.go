package jwtauth_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func staticKeys(t *testing.T, keys ...*jwttest.Key) func() *jwtauth.KeySet {
	t.Helper()
	set, err := jwtauth.ParseJWKS(jwttest.JWKS(keys...))
	if err != nil {
		t.Fatal(err)
	}
	return func() *jwtauth.KeySet { return set }
}

// unsigned returns a token with header and claims and the given signature.
func unsigned(header, claims, sig string) string {
	b := base64.RawURLEncoding.EncodeToString
	return b([]byte(header)) + "." + b([]byte(claims)) + "." + sig
}

func TestVerify(t *testing.T) {
	t.Parallel()
	rsaKey, rsaOther := jwttest.RSA(t, "r1"), jwttest.RSA(t, "r2")
	ecKey, edKey := jwttest.EC(t, "e1"), jwttest.Ed(t, "d1")
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := jwtauth.New(jwtauth.Config{
		Keys: staticKeys(t, rsaKey, ecKey, edKey), HMACSecret: secret,
		Issuer: "https://issuer.example", Audience: "gateway", CacheSize: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	noSecret, err := jwtauth.New(jwtauth.Config{Keys: staticKeys(t, rsaKey), CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	good := func(extra ...any) jwt.MapClaims {
		return jwttest.Claims(t0, time.Hour, "user-1", append([]any{"iss", "https://issuer.example", "aud", "gateway"}, extra...)...)
	}
	// An RSA public key, as PEM, used as an HMAC secret: the classic
	// algorithm confusion attack.
	der, err := x509.MarshalPKIXPublicKey(rsaKey.Private.Public())
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	confused := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, good())
		tok.Header["kid"] = "r1"
		s, err := tok.SignedString(rsaPEM)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()
	forged := rsaOther.Sign(t, good()) // kid r2: unknown
	forgedAsR1 := func() string {
		k := *rsaOther
		k.Kid = "r1"
		return k.Sign(t, good())
	}()
	ecAsRSA := func() string {
		k := *ecKey
		k.Kid = "r1" // an ES256 token naming the RSA key
		return k.Sign(t, good())
	}()
	tests := []struct {
		name  string
		v     *jwtauth.Verifier
		token string
		want  string // "" for valid; else a part of the reason
	}{
		{name: "RS256", token: rsaKey.Sign(t, good())},
		{name: "ES256", token: ecKey.Sign(t, good())},
		{name: "EdDSA", token: edKey.Sign(t, good())},
		{name: "HS256 with the secret", token: jwttest.SignHS256(t, secret, good())},
		{name: "empty", token: "", want: "malformed"},
		{name: "garbage", token: "not.a.token", want: "malformed"},
		{name: "expired", token: rsaKey.Sign(t, jwttest.Claims(t0.Add(-2*time.Hour), time.Hour, "u", "iss", "https://issuer.example", "aud", "gateway")), want: "expired"},
		{name: "not yet valid", token: rsaKey.Sign(t, good("nbf", t0.Add(time.Minute).Unix())), want: "not valid yet"},
		{name: "issued in the future", token: rsaKey.Sign(t, good("iat", t0.Add(time.Hour).Unix())), want: "issued in the future"},
		{name: "expired, no iss nor aud", token: rsaKey.Sign(t, jwttest.Claims(t0.Add(-2*time.Hour), time.Hour, "u")), want: "expired"},
		{name: "no aud", token: rsaKey.Sign(t, jwttest.Claims(t0, time.Hour, "u", "iss", "https://issuer.example")), want: "no aud claim"},
		{name: "no exp", token: rsaKey.Sign(t, jwt.MapClaims{"sub": "u", "iss": "https://issuer.example", "aud": "gateway"}), want: "no exp"},
		{name: "wrongly signed", token: forgedAsR1, want: "signature is invalid"},
		{name: "tampered", token: func() string {
			p := strings.Split(rsaKey.Sign(t, good()), ".")
			p[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","exp":9999999999}`))
			return strings.Join(p, ".")
		}(), want: "signature is invalid"},
		{name: "wrong audience", token: rsaKey.Sign(t, good("aud", "other")), want: "audience does not include gateway"},
		{name: "wrong issuer", token: rsaKey.Sign(t, good("iss", "https://evil.example")), want: "issuer is not https://issuer.example"},
		{name: "alg none", token: unsigned(`{"alg":"none","typ":"JWT"}`, `{"sub":"u","exp":9999999999,"iss":"https://issuer.example","aud":"gateway"}`, ""), want: `algorithm "none" is not allowed`},
		{name: "HS256 with the RSA public key as secret", token: confused, want: "signature is invalid"},
		{name: "HS256 without a secret file", v: noSecret, token: confused, want: `algorithm "HS256" is not allowed`},
		{name: "RS384", token: unsigned(`{"alg":"RS384","kid":"r1"}`, `{"exp":9999999999}`, "AAAA"), want: `algorithm "RS384" is not allowed`},
		{name: "unknown kid", token: forged, want: `no key in the JWKS has kid "r2"`},
		{name: "key type does not match", token: ecAsRSA, want: `key "r1" is for RS256, the token says ES256`},
		{name: "critical extension", token: func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, good())
			tok.Header["crit"] = []string{"x-ext"}
			tok.Header["x-ext"] = true
			s, err := tok.SignedString(secret)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), want: "critical extensions (crit)"},
		{name: "long kid cut", token: unsigned(`{"alg":"RS256","kid":"`+strings.Repeat("k", 500)+`"}`, `{"exp":9999999999}`, "AAAA"), want: strings.Repeat("k", 64) + `"…`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := v
			if tt.v != nil {
				v = tt.v
			}
			c, err := v.Verify(tt.token, t0)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Verify: got %v, want no error", err)
			case tt.want == "":
				if sub, _ := c.Value("sub"); sub != "user-1" {
					t.Errorf("sub: got %q, want user-1", sub)
				}
			case err == nil:
				t.Fatalf("Verify: got no error, want %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("Verify: got %q, want it to contain %q", err, tt.want)
			}
			if err != nil && tt.token != "" && len(tt.token) > 20 && strings.Contains(err.Error(), tt.token[len(tt.token)-20:]) {
				t.Errorf("the reason %q quotes the token", err)
			}
		})
	}
}

func TestClaimsValue(t *testing.T) {
	t.Parallel()
	k := jwttest.Ed(t, "d1")
	v, err := jwtauth.New(jwtauth.Config{Keys: staticKeys(t, k)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(k.Sign(t, jwttest.Claims(t0, time.Hour, "u", "n", 12345678901234, "f", 1.5, "b", true, "l", []string{"x"}, "z", nil)), t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, want, why string }{
		{"sub", "u", ""}, {"n", "12345678901234", ""}, {"f", "1.5", ""}, {"b", "true", ""},
		{"l", "", "is not a string, a number or a boolean"}, {"z", "", ""}, {"absent", "", ""},
	}
	for _, tt := range tests {
		got, why := c.Value(tt.name)
		if got != tt.want || why != tt.why {
			t.Errorf("Value(%s): got %q, %q, want %q, %q", tt.name, got, why, tt.want, tt.why)
		}
	}
}

func TestVerifyCache(t *testing.T) {
	t.Parallel()
	k := jwttest.EC(t, "e1")
	set1, err := jwtauth.ParseJWKS(jwttest.JWKS(k))
	if err != nil {
		t.Fatal(err)
	}
	set := set1
	v, err := jwtauth.New(jwtauth.Config{Keys: func() *jwtauth.KeySet { return set }, CacheSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	tok := k.Sign(t, jwttest.Claims(t0, time.Minute, "u"))
	c1, err := v.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := v.Verify(tok, t0.Add(time.Second)); c2 != c1 {
		t.Errorf("second Verify: got new claims, want the cached ones")
	}
	// Past its expiry a cached token is refused like any other.
	if _, err := v.Verify(tok, t0.Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Verify after exp: got %v, want expired", err)
	}
	// A new key set (rotation) is checked afresh: the key is gone.
	other := jwttest.EC(t, "e2")
	set2, err := jwtauth.ParseJWKS(jwttest.JWKS(other))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
	set = set2
	if _, err := v.Verify(tok, t0); err == nil || !strings.Contains(err.Error(), "unknown") && !strings.Contains(err.Error(), "no key") {
		t.Errorf("Verify after rotation: got %v, want no key", err)
	}
	// The cache stays bounded.
	for i := range 5 {
		if _, err := v.Verify(other.Sign(t, jwttest.Claims(t0, time.Minute, string(rune('a'+i)))), t0); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.CacheLen(); n > 2 {
		t.Errorf("cache: got %d entries, want at most 2", n)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if _, err := jwtauth.New(jwtauth.Config{}); err == nil {
		t.Error("New with neither keys nor secret: got no error")
	}
	if _, err := jwtauth.New(jwtauth.Config{HMACSecret: []byte("short")}); err == nil {
		t.Error("New with a 5-byte secret: got no error")
	}
}
