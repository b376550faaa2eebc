package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
)

// TestEndToEndJWT runs the binary with --jwt-jwks URL, an HS256 secret
// file and --app-from claim:azp, on rules keyed by: claim:sub; and without
// them, which refuses those rules at start, naming the rule's line.
func TestEndToEndJWT(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("configs:\n  - appId: app-1\n    limits:\n      - api: /v1\n        by: claim:sub\n        limit: 2\n        unit: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := []byte("an HS256 secret of at least 32 bytes")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	key := jwttest.EC(t, "k1")
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(jwttest.JWKS(key)) }))
	defer jwks.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"app":"`+r.Header.Get("X-App-Id")+`"}`)
	}))
	defer up.Close()

	code, _, stderr := runBinary(t, "serve", "--upstream", up.URL, "--config", rules, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, rules+":4: rule /v1 counts by claim:sub") {
		t.Errorf("claim rules without JWT: exit %d, stderr %s; want 1 naming %s:4", code, stderr, rules)
	}

	g := startGateway(t, []string{"GATEWAY_JWT_AUDIENCE=gateway"}, "--upstream", up.URL, "--config", rules,
		"--jwt-jwks", jwks.URL, "--jwt-hmac-secret-file", secretFile, "--app-from", "claim:azp", "--forward-app-header")
	now := time.Now()
	claims := func(sub string) map[string]any {
		return jwttest.Claims(now, time.Hour, sub, "azp", "app-1", "aud", "gateway")
	}
	alice := "Bearer " + key.Sign(t, claims("alice"))
	bob := "Bearer " + jwttest.SignHS256(t, secret, claims("bob"))
	steps := []struct {
		name       string
		hdr        []string
		want       int
		wantInBody string
	}{
		{"alice 1, naming app-2", []string{"Authorization", alice, "X-App-Id", "app-2"}, 200, `{"app":"app-1"}`},
		{"alice 2", []string{"Authorization", alice}, 200, ""},
		{"alice 3", []string{"Authorization", alice}, 429, `"error":"rate_limited"`},
		{"bob, HS256", []string{"Authorization", bob}, 200, ""},
		{"no token", []string{"X-App-Id", "app-1"}, 401, `"error":"missing_token"`},
		{"wrong audience", []string{"Authorization", "Bearer " + key.Sign(t, jwttest.Claims(now, time.Hour, "c", "azp", "app-1", "aud", "x"))}, 401, `"error":"invalid_token"`},
	}
	for _, s := range steps {
		if code, body := send(t, "GET", g.proxy+"/v1", s.hdr...); code != s.want || !strings.Contains(body, s.wantInBody) {
			t.Errorf("%s: got %d %s, want %d with %s", s.name, code, body, s.want, s.wantInBody)
		}
	}
}
