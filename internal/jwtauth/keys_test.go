package jwtauth_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
)

func TestParseJWKS(t *testing.T) {
	t.Parallel()
	ec := jwttest.EC(t, "e1").JWK()
	jwk := func(edit func(m map[string]string)) string {
		m := map[string]string{}
		for k, v := range ec {
			m[k] = v
		}
		edit(m)
		var b strings.Builder
		b.WriteString("{")
		first := true
		for k, v := range m {
			if !first {
				b.WriteString(",")
			}
			first = false
			b.WriteString(`"` + k + `":"` + v + `"`)
		}
		return b.String() + "}"
	}
	small := `{"kty":"RSA","kid":"s","n":"` + strings.Repeat("A", 170) + `","e":"AQAB"}`
	tests := []struct {
		name, doc string
		keys      int
		want      string // a part of the error, "" for none
	}{
		{name: "one EC key", doc: `{"keys":[` + jwk(func(map[string]string) {}) + `]}`, keys: 1},
		{name: "encryption key skipped", doc: `{"keys":[` + jwk(func(map[string]string) {}) + `,` + jwk(func(m map[string]string) { m["use"], m["kid"] = "enc", "x" }) + `]}`, keys: 1},
		{name: "other curve skipped", doc: `{"keys":[` + jwk(func(map[string]string) {}) + `,` + jwk(func(m map[string]string) { m["crv"], m["kid"] = "P-384", "x" }) + `]}`, keys: 1},
		{name: "not JSON", doc: `{"keys":`, want: "parsing the JWKS"},
		{name: "no keys", doc: `{"keys":[]}`, want: "holds no"},
		{name: "only skipped keys", doc: `{"keys":[{"kty":"oct","k":"AAAA"}]}`, want: "holds no"},
		{name: "point off the curve", doc: `{"keys":[` + jwk(func(m map[string]string) { m["y"] = m["x"] }) + `]}`, want: "kid \"e1\""},
		{name: "short coordinate", doc: `{"keys":[` + jwk(func(m map[string]string) { m["x"] = "AAAA" }) + `]}`, want: "x: 3 bytes, want 32"},
		{name: "alg of another type", doc: `{"keys":[` + jwk(func(m map[string]string) { m["alg"] = "RS256" }) + `]}`, want: "alg RS256 does not go with a EC key"},
		{name: "HS256 never from the JWKS", doc: `{"keys":[` + jwk(func(m map[string]string) { m["alg"] = "HS256" }) + `]}`, want: "alg HS256"},
		{name: "kid twice", doc: `{"keys":[` + jwk(func(map[string]string) {}) + `,` + jwk(func(map[string]string) {}) + `]}`, want: "used twice"},
		{name: "small RSA", doc: `{"keys":[` + small + `]}`, want: "at least 2048"},
		{name: "bad base64", doc: `{"keys":[` + jwk(func(m map[string]string) { m["x"] = "!!" }) + `]}`, want: "x: illegal base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, err := jwtauth.ParseJWKS([]byte(tt.doc))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ParseJWKS: got %v, want no error", err)
			case tt.want == "":
				if set.Len() != tt.keys {
					t.Errorf("keys: got %d, want %d", set.Len(), tt.keys)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("ParseJWKS: got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// jwksServer serves a JWKS that the test can change, or fail.
type jwksServer struct {
	mu     sync.Mutex
	body   []byte
	status int
}

func (s *jwksServer) set(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.WriteHeader(s.status)
	w.Write(s.body)
}

func TestKeysURL(t *testing.T) {
	t.Parallel()
	a, b := jwttest.RSA(t, "a"), jwttest.EC(t, "b")
	js := &jwksServer{}
	js.set(http.StatusOK, jwttest.JWKS(a))
	srv := httptest.NewServer(js)
	defer srv.Close()
	ctx := context.Background()
	keys, err := jwtauth.NewKeys(ctx, jwtauth.KeysConfig{Source: srv.URL + "/jwks.json"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := jwtauth.New(jwtauth.Config{Keys: keys.Current})
	if err != nil {
		t.Fatal(err)
	}
	tokA := a.Sign(t, jwttest.Claims(t0, time.Hour, "u"))
	tokB := b.Sign(t, jwttest.Claims(t0, time.Hour, "u"))
	check := func(step, tok, want string) {
		t.Helper()
		_, err := v.Verify(tok, t0)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: got %v, want valid", step, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want %q", step, err, want)
		}
	}
	check("before rotation, a", tokA, "")
	check("before rotation, b", tokB, `no key in the JWKS has kid "b"`)

	// Rotation: b is added, then a removed.
	js.set(http.StatusOK, jwttest.JWKS(a, b))
	if err := keys.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	check("both, a", tokA, "")
	check("both, b", tokB, "")
	js.set(http.StatusOK, jwttest.JWKS(b))
	if err := keys.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	check("after rotation, a", tokA, `no key in the JWKS has kid "a"`)
	check("after rotation, b", tokB, "")

	// A failing endpoint, or a broken set, leaves the last good set.
	for _, f := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusInternalServerError, "oops", "status 500"},
		{http.StatusOK, `{"keys":[]}`, "holds no"},
		{http.StatusOK, `<html>`, "parsing"},
	} {
		js.set(f.status, []byte(f.body))
		if err := keys.Reload(ctx); err == nil || !strings.Contains(err.Error(), f.want) {
			t.Errorf("Reload from a %d %q: got %v, want %q", f.status, f.body, err, f.want)
		}
		check("endpoint failing, b", tokB, "")
	}
	srv.CloseClientConnections()
}

func TestKeysURLRun(t *testing.T) {
	t.Parallel()
	a, b := jwttest.EC(t, "a"), jwttest.EC(t, "b")
	js := &jwksServer{}
	js.set(http.StatusOK, jwttest.JWKS(a))
	srv := httptest.NewServer(js)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &lockedBuffer{}
	keys, err := jwtauth.NewKeys(ctx, jwtauth.KeysConfig{Source: srv.URL, Refresh: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := keys.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jwtauth.New(jwtauth.Config{Keys: keys.Current, CacheSize: -1})
	tokB := b.Sign(t, jwttest.Claims(t0, time.Hour, "u"))
	js.set(http.StatusOK, jwttest.JWKS(b))
	eventually.True(t, 30*time.Second, func() bool { _, err := v.Verify(tokB, t0); return err == nil }, "the refreshed JWKS is never used")
	// The endpoint fails: the refreshes fail, and the last good set
	// stays in force.
	js.set(http.StatusBadGateway, nil)
	eventually.True(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), "status 502") }, "no failed refresh logged")
	if _, err := v.Verify(tokB, t0); err != nil {
		t.Errorf("while the endpoint fails: got %v, want the last good set in force", err)
	}
	stop()
}

// lockedBuffer is a log destination safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestKeysFile(t *testing.T) {
	t.Parallel()
	a, b := jwttest.Ed(t, "a"), jwttest.Ed(t, "b")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(a), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys, err := jwtauth.NewKeys(ctx, jwtauth.KeysConfig{Source: path})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := keys.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jwtauth.New(jwtauth.Config{Keys: keys.Current, CacheSize: -1})
	tokB := b.Sign(t, jwttest.Claims(t0, time.Hour, "u"))
	// Replaced by a rename, as editors and Kubernetes do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, jwttest.JWKS(b), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, func() bool { _, err := v.Verify(tokB, t0); return err == nil }, "the rewritten JWKS file is never used")
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := keys.Reload(ctx); err == nil {
		t.Error("Reload of a broken file: got no error")
	}
	if _, err := v.Verify(tokB, t0); err != nil {
		t.Errorf("after a broken file: got %v, want the last good set in force", err)
	}
	stop()
	if _, err := jwtauth.NewKeys(ctx, jwtauth.KeysConfig{Source: filepath.Join(t.TempDir(), "none.json")}); err == nil {
		t.Error("NewKeys of a missing file: got no error")
	}
}
