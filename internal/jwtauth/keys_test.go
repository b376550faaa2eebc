package jwtauth_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
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
		{name: "zero RSA modulus", doc: `{"keys":[` + small + `]}`, want: "modulus is zero"},
		{name: "only a small RSA key", doc: `{"keys":[` + weakRSA("w") + `]}`, want: `holds no RSA, P-256 or Ed25519 signing key (RS256, ES256, EdDSA); skipped: kid "w" (RSA, 1024-bit modulus, fewer than the 2048 RFC 7518 requires)`},
		{name: "small RSA beside a good key", doc: `{"keys":[` + weakRSA("w") + `,` + jwk(func(map[string]string) {}) + `]}`, keys: 1},
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
	logs := &gwtest.Log{}
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

// countingJWKS is a jwksServer that counts the fetches.
type countingJWKS struct {
	jwksServer
	mu      sync.Mutex
	fetches int
}

func (s *countingJWKS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.fetches++
	s.mu.Unlock()
	s.jwksServer.ServeHTTP(w, r)
}

func (s *countingJWKS) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// withAlg returns k's JWK as a key of another algorithm: the same key
// material, published for PS256 or RS384 as identity providers do.
func withAlg(k *jwttest.Key, kid, alg string) *jwttest.Key {
	return &jwttest.Key{Kid: kid, Alg: alg, Private: k.Private}
}

// TestKeysSkipUnverifiedAlgorithms serves, from a real JWKS endpoint, RS256
// keys beside keys of algorithms the gateway does not verify (PS256,
// RS384, an EC P-384 key): the set loads at start, a rotation that adds
// such a key lands, tokens of the RS256 keys verify, tokens of the others
// are refused with a reason, and the skipped keys are logged once, not at
// every refresh.
func TestKeysSkipUnverifiedAlgorithms(t *testing.T) {
	t.Parallel()
	a, b := jwttest.RSA(t, "a"), jwttest.RSA(t, "b")
	ps := withAlg(jwttest.RSA(t, "p"), "p", "PS256")
	rs384 := withAlg(a, "a384", "RS384")
	p384 := jwttest.EC(t, "e384").JWK()
	p384["crv"] = "P-384"
	doc := func(keys ...*jwttest.Key) []byte {
		var d struct {
			Keys []map[string]string `json:"keys"`
		}
		if err := json.Unmarshal(jwttest.JWKS(keys...), &d); err != nil {
			t.Fatal(err)
		}
		d.Keys = append(d.Keys, p384)
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	js := &jwksServer{}
	js.set(http.StatusOK, doc(a, ps, rs384))
	srv := httptest.NewServer(js)
	defer srv.Close()
	logs := &gwtest.Log{}
	ctx := context.Background()
	keys, err := jwtauth.NewKeys(ctx, jwtauth.KeysConfig{Source: srv.URL, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("NewKeys of RS256 beside PS256, RS384 and P-384 keys: %v", err)
	}
	if got := keys.Current().Len(); got != 1 {
		t.Errorf("keys in force: got %d, want 1 (a)", got)
	}
	wantSkipped := `kid "p" (RSA, alg PS256), kid "a384" (RSA, alg RS384), kid "e384" (EC/P-384, alg ES256)`
	if got := strings.Join(keys.Current().Skipped(), ", "); got != wantSkipped {
		t.Errorf("skipped: got %s, want %s", got, wantSkipped)
	}
	v, err := jwtauth.New(jwtauth.Config{Keys: keys.Current, CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(step string, k *jwttest.Key, want string) {
		t.Helper()
		_, err := v.Verify(k.Sign(t, jwttest.Claims(t0, time.Hour, "u")), t0)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: got %v, want valid", step, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want %q", step, err, want)
		}
	}
	verify("RS256 key a", a, "")
	verify("PS256 token of key p", ps, `algorithm "PS256" is not allowed`)
	verify("RS256 token naming the PS256 key p", withAlg(ps, "p", "RS256"), `key "p" is for RSA, alg PS256`)
	verify("RS384 token of kid a384", rs384, `algorithm "RS384" is not allowed`)

	// A rotation that adds b beside the skipped keys lands.
	js.set(http.StatusOK, doc(a, b, ps, rs384))
	if err := keys.Reload(ctx); err != nil {
		t.Fatalf("Reload with b added: %v", err)
	}
	verify("RS256 key b after the rotation", b, "")
	if err := keys.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "JWKS keys skipped"); n != 1 {
		t.Errorf("skipped keys logged %d times over three loads of the same skipped keys, want 1:\n%s", n, logs)
	}
	// A set of skipped keys only is refused, and says what it skipped.
	js.set(http.StatusOK, jwttest.JWKS(ps))
	if err := keys.Reload(ctx); err == nil || !strings.Contains(err.Error(), `skipped: kid "p" (RSA, alg PS256)`) {
		t.Errorf("Reload of PS256 keys only: got %v, want an error naming the skipped key", err)
	}
	verify("b, after a set of skipped keys only", b, "")
}

// TestKeysRefetchUnknownKid checks that a token naming a kid the set in
// force lacks makes the gateway fetch a URL JWKS again, at once, so that
// a key rotated in is used before the next refresh; and that tokens with
// made-up kids cause at most one fetch per Refetch interval, however many
// arrive and however concurrently. The interval runs on a fake clock.
func TestKeysRefetchUnknownKid(t *testing.T) {
	t.Parallel()
	a, b, c := jwttest.EC(t, "a"), jwttest.EC(t, "b"), jwttest.EC(t, "c")
	js := &countingJWKS{}
	js.set(http.StatusOK, jwttest.JWKS(a))
	srv := httptest.NewServer(js)
	defer srv.Close()
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	keys, err := jwtauth.NewKeys(context.Background(), jwtauth.KeysConfig{Source: srv.URL, Refetch: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	v, err := jwtauth.New(jwtauth.Config{Keys: keys.Current, Refetch: keys.Refetch})
	if err != nil {
		t.Fatal(err)
	}
	tok := func(k *jwttest.Key) string { return k.Sign(t, jwttest.Claims(t0, time.Hour, "u")) }
	made := func(i int) string {
		return jwttest.EC(t, fmt.Sprintf("made-up-%d", i)).Sign(t, jwttest.Claims(t0, time.Hour, "u"))
	}
	type step struct {
		name    string
		advance time.Duration
		serve   []*jwttest.Key // the endpoint's keys from this step on; nil: unchanged
		token   string
		want    string // part of the error; "" for valid
		fetches int    // fetches so far, the one at start included
	}
	steps := []step{
		{name: "a key in force", token: tok(a), fetches: 1},
		{name: "b rotated in: fetched at once", serve: []*jwttest.Key{a, b}, token: tok(b), fetches: 2},
		{name: "made-up kid within the interval: no fetch", token: made(1), want: `no key in the JWKS has kid "made-up-1"`, fetches: 2},
		{name: "c rotated in within the interval: not yet", serve: []*jwttest.Key{a, b, c}, advance: 59 * time.Second, token: tok(c), want: `kid "c"`, fetches: 2},
		{name: "c once the interval has passed", advance: time.Second, token: tok(c), fetches: 3},
		{name: "made-up kid right after", token: made(2), want: "no key", fetches: 3},
		{name: "made-up kid an interval later: one fetch", advance: time.Minute, token: made(3), want: "no key", fetches: 4},
	}
	for _, s := range steps {
		if s.serve != nil {
			js.set(http.StatusOK, jwttest.JWKS(s.serve...))
		}
		advance(s.advance)
		_, err := v.Verify(s.token, t0)
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: got %v, want valid", s.name, err)
		case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: got %v, want %q", s.name, err, s.want)
		}
		if got := js.count(); got != s.fetches {
			t.Errorf("%s: fetches %d, want %d", s.name, got, s.fetches)
		}
	}

	// 200 tokens with made-up kids at once, an interval later: one fetch.
	advance(time.Minute)
	tokens := make([]string, 200)
	for i := range tokens {
		tokens[i] = made(100 + i)
	}
	var wg sync.WaitGroup
	for _, tk := range tokens {
		wg.Go(func() {
			if _, err := v.Verify(tk, t0); err == nil {
				t.Error("a made-up kid verified")
			}
		})
	}
	wg.Wait()
	if got := js.count(); got != 5 {
		t.Errorf("200 concurrent made-up kids: fetches %d, want 5 (one more)", got)
	}

	// A file is watched, not fetched for unknown kids.
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(a), 0o600); err != nil {
		t.Fatal(err)
	}
	fk, err := jwtauth.NewKeys(context.Background(), jwtauth.KeysConfig{Source: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := fk.Refetch("b"); got != nil {
		t.Errorf("Refetch of a file: got a set, want nil")
	}
}

// weakRSA returns a well-formed RSA JWK of kid whose modulus has 1024
// bits: too short to trust, never used to verify.
func weakRSA(kid string) string {
	n := append([]byte{0xc1}, bytes.Repeat([]byte{0x5b}, 127)...)
	return `{"kty":"RSA","kid":"` + kid + `","alg":"RS256","n":"` + base64.RawURLEncoding.EncodeToString(n) + `","e":"AQAB"}`
}

// TestKeysSkipWeakRSA checks that an RSA key of fewer than 2048 bits in
// a JWKS is skipped as keys of other algorithms are, so that a provider
// still publishing an old 1024-bit key beside its new ones does not block
// their rotation; and that a refused set's error, which the gateway logs,
// stays short whatever the set holds.
func TestKeysSkipWeakRSA(t *testing.T) {
	t.Parallel()
	a := jwttest.RSA(t, "a")
	var d struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(jwttest.JWKS(a), &d); err != nil {
		t.Fatal(err)
	}
	d.Keys = append(d.Keys, json.RawMessage(weakRSA("old")))
	doc, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &gwtest.Log{}
	keys, err := jwtauth.NewKeys(context.Background(), jwtauth.KeysConfig{Source: file, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("NewKeys of a 2048-bit key beside a 1024-bit one: %v", err)
	}
	if got := keys.Current().Len(); got != 1 {
		t.Errorf("keys in force: got %d, want 1 (a)", got)
	}
	want := `kid "old" (RSA, 1024-bit modulus, fewer than the 2048 RFC 7518 requires)`
	if got := strings.Join(keys.Current().Skipped(), ", "); got != want {
		t.Errorf("skipped: got %s, want %s", got, want)
	}
	if !strings.Contains(logs.String(), "JWKS keys skipped") {
		t.Errorf("the skipped key was not logged:\n%s", logs)
	}
	v, err := jwtauth.New(jwtauth.Config{Keys: keys.Current, CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(a.Sign(t, jwttest.Claims(t0, time.Hour, "u")), t0); err != nil {
		t.Errorf("token of key a: %v", err)
	}
	if _, err := v.Verify(withAlg(a, "old", "RS256").Sign(t, jwttest.Claims(t0, time.Hour, "u")), t0); err == nil || !strings.Contains(err.Error(), "1024-bit") {
		t.Errorf("token naming the weak key: got %v, want an error saying it is skipped", err)
	}

	// Refused sets: a malformed key with a huge kid, and tens of
	// thousands of skipped keys. The error is what the log line holds.
	huge := strings.Repeat("k", 400<<10)
	many := make([]string, 20000)
	for i := range many {
		many[i] = weakRSA("w" + strconv.Itoa(i))
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"huge kid", `{"keys":[{"kty":"EC","crv":"P-256","kid":"` + huge + `","x":"AAAA","y":"AAAA"}]}`, "x: 3 bytes, want 32"},
		{"many skipped", `{"keys":[` + strings.Join(many, ",") + `]}`, "and 19992 more"},
	} {
		_, err := jwtauth.ParseJWKS([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %.200v, want an error containing %q", tc.name, err, tc.want)
			continue
		}
		if n := len(err.Error()); n > 2048 {
			t.Errorf("%s: the error is %d bytes long, want at most 2 KiB", tc.name, n)
		}
	}
}
