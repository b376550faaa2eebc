package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
)

// jwtRules key /v1/user by subject, two a minute.
const jwtRules = `configs:
  - appId: app-1
    limits:
      - api: /v1/user
        by: claim:sub
        limit: 2
        unit: 1m
`

// TestJWTFlags checks the errors of the --jwt-* flags and --app-from,
// all found before anything listens.
func TestJWTFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	claimRules := write("claims.yaml", jwtRules)
	short := write("short-secret", "too short\n")
	badJWKS := write("bad.json", `{"keys":[]}`)
	tests := []newRefusal{
		{name: "claim rules without JWT", edit: func(c *Config) { c.ConfigPath = claimRules }, want: claimRules + ":4: rule /v1/user counts by claim:sub, a claim of a verified JWT, but callers' tokens are not verified: set --jwt-jwks or --jwt-hmac-secret-file"},
		{name: "app from a claim without JWT", edit: func(c *Config) { c.AppFrom = "claim:azp" }, want: "--app-from claim:azp needs verified tokens"},
		{name: "app from nowhere", edit: func(c *Config) { c.AppFrom = "cookie" }, want: `--app-from "cookie" is not valid`},
		{name: "app from no claim", edit: func(c *Config) { c.AppFrom = "claim:" }, want: "names no claim"},
		{name: "issuer without JWT", edit: func(c *Config) { c.JWTIssuer = "x" }, want: "--jwt-issuer and --jwt-audience check verified tokens"},
		{name: "zero refresh", edit: func(c *Config) { c.JWTJWKSRefresh = 0 }, want: "--jwt-jwks-refresh 0s is not positive"},
		{name: "zero refetch", edit: func(c *Config) { c.JWTJWKSRefetch = 0 }, want: "--jwt-jwks-refetch 0s is not positive"},
		{name: "JWT header is the app header", edit: func(c *Config) { c.JWTJWKS, c.JWTHeader = badJWKS, "x-app-id" }, want: "--jwt-header x-app-id is also the app or key header"},
		{name: "missing JWKS", edit: func(c *Config) { c.JWTJWKS = filepath.Join(dir, "nope.json") }, want: "--jwt-jwks: loading the JWKS " + filepath.Join(dir, "nope.json")},
		{name: "empty JWKS", edit: func(c *Config) { c.JWTJWKS = badJWKS }, want: "holds no RSA, P-256 or Ed25519 signing key"},
		{name: "short secret", edit: func(c *Config) { c.JWTHMACSecretFile = short }, want: "the HMAC secret has 9 bytes; HS256 needs at least 32"},
		{name: "missing secret", edit: func(c *Config) { c.JWTHMACSecretFile = filepath.Join(dir, "nope") }, want: "--jwt-hmac-secret-file: open"},
	}
	checkNewRefuses(t, dir, tests)
}

// TestJWTLive serves a gateway with --jwt-jwks FILE, an HS256 secret,
// --app-from claim:azp and rules by: claim:sub: the token's azp, not the
// app header, names the app; each subject has its counter; a rotated
// JWKS file is picked up while serving.
func TestJWTLive(t *testing.T) {
	t.Parallel()
	a, b := jwttest.EC(t, "a"), jwttest.Ed(t, "b")
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwks, jwttest.JWKS(a), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startLive(t, func(c *Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(jwtRules), 0o644); err != nil {
			t.Fatal(err)
		}
		c.JWTJWKS, c.JWTHMACSecretFile, c.AppFrom = jwks, secretFile, "claim:azp"
		c.JWTIssuer, c.JWTAudience = "https://issuer.example", "gateway"
		c.UnknownCallers = RejectUnknown
	})
	now := time.Now()
	claims := func(sub string) map[string]any {
		return jwttest.Claims(now, time.Hour, sub, "azp", "app-1", "iss", "https://issuer.example", "aud", "gateway")
	}
	get := func(tok, app string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+g.proxy+"/v1/user", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req.Header.Set("X-App-Id", app)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	alice, bob := a.Sign(t, claims("alice")), jwttest.SignHS256(t, secret, claims("bob"))
	steps := []struct {
		name, tok, app string
		want           int
	}{
		{"alice 1, naming another app", alice, "app-2", 200},
		{"alice 2", alice, "", 200},
		{"alice 3", alice, "app-1", 429},
		{"bob, HS256", bob, "", 200},
		{"no token", "", "app-1", 401},
		{"key b not yet in the JWKS", b.Sign(t, claims("carol")), "", 401},
	}
	for _, s := range steps {
		if got := get(s.tok, s.app); got != s.want {
			t.Errorf("%s: got %d, want %d", s.name, got, s.want)
		}
	}
	// Rotation: b replaces a in the file.
	tmp := jwks + ".tmp"
	if err := os.WriteFile(tmp, jwttest.JWKS(b), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, jwks); err != nil {
		t.Fatal(err)
	}
	carol := b.Sign(t, claims("carol"))
	eventually.True(t, 30*time.Second, func() bool { return get(carol, "") == 200 }, "the rotated JWKS file is never used")
	if got := get(a.Sign(t, claims("dave")), ""); got != 401 {
		t.Errorf("key a after rotation: got %d, want 401", got)
	}
}

// TestJWTURLRotation serves a gateway with --jwt-jwks URL, a real JWKS
// endpoint that publishes a PS256 key beside the ES256 key in use: the
// gateway starts, and a key rotated in later is used by the first token
// that names it, long before the next refresh (an hour here), because a
// token naming an unknown kid makes the gateway fetch the set again.
func TestJWTURLRotation(t *testing.T) {
	t.Parallel()
	a, b := jwttest.EC(t, "a"), jwttest.EC(t, "b")
	ps := &jwttest.Key{Kid: "ps", Alg: "PS256", Private: jwttest.RSA(t, "ps").Private}
	var mu sync.Mutex
	keys := []*jwttest.Key{a, ps}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Write(jwttest.JWKS(keys...))
	}))
	defer jwks.Close()
	g := startLive(t, func(c *Config) {
		c.JWTJWKS, c.JWTJWKSRefresh, c.AppFrom = jwks.URL, time.Hour, "claim:azp"
	})
	get := func(tok string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+g.proxy+"/v1/user", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	claims := jwttest.Claims(time.Now(), time.Hour, "alice", "azp", "app-1")
	if got := get(a.Sign(t, claims)); got != 200 {
		t.Errorf("key a beside a PS256 key: got %d, want 200", got)
	}
	mu.Lock()
	keys = []*jwttest.Key{a, b, ps}
	mu.Unlock()
	if got := get(b.Sign(t, claims)); got != 200 {
		t.Errorf("key b, rotated in after the last fetch: got %d, want 200", got)
	}
}
