package jwtauth_test

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
)

// FuzzParseJWKS checks that no JWKS makes the parser panic, and that a
// set it accepts holds keys.
func FuzzParseJWKS(f *testing.F) {
	f.Add(jwttest.JWKS(jwttest.EC(f, "e"), jwttest.Ed(f, "d")))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":""}]}`))
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","use":"enc"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := jwtauth.ParseJWKS(data)
		if err == nil && set.Len() == 0 {
			t.Fatal("ParseJWKS accepted a set without keys")
		}
	})
}

// FuzzVerify checks that no token makes the verifier panic or accept it
// unsigned.
func FuzzVerify(f *testing.F) {
	k := jwttest.EC(f, "e")
	set, err := jwtauth.ParseJWKS(jwttest.JWKS(k))
	if err != nil {
		f.Fatal(err)
	}
	v, err := jwtauth.New(jwtauth.Config{Keys: func() *jwtauth.KeySet { return set }, CacheSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	f.Add(k.Sign(f, jwttest.Claims(now, time.Hour, "u")))
	f.Add("eyJhbGciOiJub25lIn0.eyJleHAiOjk5OTk5OTk5OTl9.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(token, now)
		if err == nil && c == nil {
			t.Fatal("Verify returned neither claims nor an error")
		}
	})
}
