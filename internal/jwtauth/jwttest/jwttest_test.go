package jwttest

import (
	"crypto/rsa"
	"testing"
)

// TestRSA checks the fixed keys: every one valid and 2048 bits, distinct
// from the others, the same key for the same kid and a different one for
// another.
func TestRSA(t *testing.T) {
	pool, err := parseRSAKeys(rsaPEM)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range pool {
		if err := k.Validate(); err != nil {
			t.Errorf("key %d: %v", i+1, err)
		}
		if got := k.N.BitLen(); got != 2048 {
			t.Errorf("key %d: got %d bits, want 2048", i+1, got)
		}
		for j, o := range pool[:i] {
			if k.Equal(o) {
				t.Errorf("keys %d and %d are the same", j+1, i+1)
			}
		}
	}

	a1, b, a2 := RSA(t, "test-rsa-a"), RSA(t, "test-rsa-b"), RSA(t, "test-rsa-a")
	if !a1.Private.(*rsa.PrivateKey).Equal(a2.Private) {
		t.Error("the same kid got two keys")
	}
	if a1.Private.(*rsa.PrivateKey).Equal(b.Private) {
		t.Error("two kids got the same key")
	}
	if a1.Kid != "test-rsa-a" || a1.Alg != "RS256" {
		t.Errorf("got kid %q alg %q, want test-rsa-a RS256", a1.Kid, a1.Alg)
	}
}

func TestParseRSAKeysRejects(t *testing.T) {
	tests := []struct {
		name string
		pem  string
	}{
		{"empty", ""},
		{"not a key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseRSAKeys([]byte(tt.pem)); err == nil {
				t.Error("got no error")
			}
		})
	}
}
