package proxy

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
)

// TestJWTVerifiedOncePerRequest: a request whose app ID comes from a
// claim, counted by a total, a rule and a concurrency limit that all key
// on a claim, has its token verified once, and every one of them (and
// the outcome's keys) reads the claims of that verification. The
// verifier has no cache and asks its key set once per verification.
func TestJWTVerifiedOncePerRequest(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    by: claim:sub
    limit: 100
    unit: 1m
    concurrency: 5
    limits:
      - api: /v1/user
        by: claim:sub
        limit: 2
        unit: 1m
        concurrency: 3
      - api: /v1/open
        limit: 100
        unit: 1m
`
	s := newJWTSetup(t, 0)
	v, verifications := countingVerifier(t, s)
	g := newGW(t, rules, withJWT(v, "azp"))
	tok := "Bearer " + s.rsa.Sign(t, jwtClaims("alice", "app-1"))
	send := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "203.0.113.1:4321"
		r.Header.Set("Authorization", tok)
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		return w
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		before := verifications.Load()
		w := send("/v1/user")
		if w.Code != want {
			t.Fatalf("request %d: got %d, want %d (%s)", i+1, w.Code, want, w.Body)
		}
		if got := verifications.Load() - before; got != 1 {
			t.Errorf("request %d: the token was verified %d times, want 1", i+1, got)
		}
		o := g.obs.last()
		if o.App != "app-1" {
			t.Errorf("request %d: counted under %q, want app-1", i+1, o.App)
		}
		for _, l := range o.Limits() {
			if l.Key != "alice" {
				t.Errorf("request %d: limit %q's key %q, want the subject alice", i+1, l.API, l.Key)
			}
		}
	}
	// A rule that counts by no claim: verified once all the same, for
	// the app ID (and the total, which counts by the subject).
	before := verifications.Load()
	if w := send("/v1/open"); w.Code != http.StatusOK {
		t.Fatalf("/v1/open: got %d, want 200 (%s)", w.Code, w.Body)
	}
	if got := verifications.Load() - before; got != 1 {
		t.Errorf("/v1/open: the token was verified %d times, want 1", got)
	}
}

// TestJWTVerifiedOnlyWhenNeeded: with the app ID from the app header, a
// token is verified only for a request a claim-keyed limit applies to;
// another passes its Authorization header, whatever it holds, to the
// upstream unverified.
func TestJWTVerifiedOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        by: claim:sub
        limit: 100
        unit: 1m
      - api: /v1/other
        limit: 100
        unit: 1m
`
	s := newJWTSetup(t, 0)
	v, verifications := countingVerifier(t, s)
	g := newGW(t, rules, withJWT(v, ""))
	tests := []struct {
		name, path, auth string
		want             int
		verified         int64
	}{
		{name: "claim rule", path: "/v1/user", auth: "Bearer " + s.rsa.Sign(t, jwtClaims("bob", "x")), want: 200, verified: 1},
		{name: "claim rule, bad token", path: "/v1/user", auth: "Bearer x.y.z", want: 401, verified: 1},
		{name: "other rule, bad token", path: "/v1/other", auth: "Bearer x.y.z", want: 200, verified: 0},
	}
	for _, tt := range tests {
		before := verifications.Load()
		r := httptest.NewRequest("GET", tt.path, nil)
		r.Header.Set("X-App-Id", "app-1")
		r.Header.Set("Authorization", tt.auth)
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("%s: got %d, want %d (%s)", tt.name, w.Code, tt.want, w.Body)
		}
		if got := verifications.Load() - before; got != tt.verified {
			t.Errorf("%s: verified %d times, want %d", tt.name, got, tt.verified)
		}
	}
}

// countingVerifier returns a verifier of s's tokens without a cache, and
// the number of times it looked up its key set: once per token it
// verified.
func countingVerifier(t *testing.T, s *jwtSetup) (*jwtauth.Verifier, *atomic.Int64) {
	t.Helper()
	var verifications atomic.Int64
	v, err := jwtauth.New(jwtauth.Config{
		Keys: func() *jwtauth.KeySet {
			verifications.Add(1)
			return s.keys()
		},
		Issuer: jwtIssuer, Audience: jwtAudience, CacheSize: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, &verifications
}
