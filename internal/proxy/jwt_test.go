package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

const jwtIssuer, jwtAudience = "https://issuer.example", "gateway"

// jwtSetup is a JWKS endpoint serving signing keys, and a verifier that
// fetches its keys from it, as `gateway serve --jwt-jwks URL` does.
type jwtSetup struct {
	rsa, ec *jwttest.Key
	keys    func() *jwtauth.KeySet
	v       *jwtauth.Verifier
}

func newJWTSetup(t testing.TB, cacheSize int) *jwtSetup {
	t.Helper()
	s := &jwtSetup{rsa: jwttest.RSA(t, "rsa-1"), ec: jwttest.EC(t, "ec-1")}
	jwks := jwttest.JWKS(s.rsa, s.ec)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(jwks) }))
	t.Cleanup(srv.Close)
	keys, err := jwtauth.NewKeys(context.Background(), jwtauth.KeysConfig{Source: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s.keys = keys.Current
	s.v, err = jwtauth.New(jwtauth.Config{Keys: keys.Current, Issuer: jwtIssuer, Audience: jwtAudience, CacheSize: cacheSize})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claims returns valid claims at t0 for sub, with azp and extra.
func jwtClaims(sub, azp string, extra ...any) jwt.MapClaims {
	return jwttest.Claims(t0, time.Hour, sub, append([]any{"azp", azp, "iss", jwtIssuer, "aud", jwtAudience}, extra...)...)
}

func withJWT(v *jwtauth.Verifier, appClaim string) gwOption {
	return func(c *HandlerConfig, _ *UpstreamConfig) { c.JWT, c.AppClaim = v, appClaim }
}

// jwtStep is one request of a JWT test: its headers, and what it gets.
type jwtStep struct {
	name    string
	hdr     []string // name, value pairs
	want    int
	wantErr string // the error code of a refused request
	wantMsg string // a part of its message
	wantApp string // the app the request was counted under
}

func runJWTSteps(t *testing.T, g *gw, steps []jwtStep) {
	t.Helper()
	for i, s := range steps {
		r := httptest.NewRequest("GET", "/v1/user", nil)
		r.RemoteAddr = "203.0.113.1:4321"
		for k := 0; k+1 < len(s.hdr); k += 2 {
			r.Header.Add(s.hdr[k], s.hdr[k+1])
		}
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		if w.Code != s.want {
			t.Fatalf("step %d (%s): got %d, want %d (body %s)", i, s.name, w.Code, s.want, w.Body)
		}
		if s.wantApp != "" {
			if got := g.obs.last().App; got != s.wantApp {
				t.Errorf("step %d (%s): counted under %q, want %q", i, s.name, got, s.wantApp)
			}
		}
		if w.Code == http.StatusOK {
			continue
		}
		var body struct{ Error, Message string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("step %d (%s): body is not JSON: %s", i, s.name, w.Body)
		}
		if body.Error != s.wantErr || !strings.Contains(body.Message, s.wantMsg) {
			t.Errorf("step %d (%s): got %s %q, want %s containing %q", i, s.name, body.Error, body.Message, s.wantErr, s.wantMsg)
		}
		if w.Code == http.StatusUnauthorized {
			want := `Bearer error="invalid_token"`
			if s.wantErr == "missing_token" {
				want = "Bearer" // RFC 6750 §3.1: no error code when no token was sent
			}
			if got := w.Header().Get("WWW-Authenticate"); got != want {
				t.Errorf("step %d (%s): WWW-Authenticate %q, want %q", i, s.name, got, want)
			}
			for k := 1; k < len(s.hdr); k += 2 {
				if tok := strings.TrimPrefix(s.hdr[k], "Bearer "); len(tok) > 40 && strings.Contains(w.Body.String(), tok[len(tok)-30:]) {
					t.Errorf("step %d (%s): the body quotes the token", i, s.name)
				}
			}
		}
	}
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// TestJWTRefused sends every kind of bad token to a gateway whose app IDs
// come from the azp claim: each gets 401 with its reason.
func TestJWTRefused(t *testing.T) {
	t.Parallel()
	s := newJWTSetup(t, 0)
	g := newGW(t, "configs:\n  - appId: app-1\n    limits:\n      - {api: /v1/user, limit: 100}\n", withJWT(s.v, "azp"))
	other := jwttest.RSA(t, "rsa-other")
	forged := *other
	forged.Kid = "rsa-1" // the gateway's kid, another key
	b64 := base64.RawURLEncoding.EncodeToString
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(`{"sub":"u","azp":"app-1","exp":9999999999,"iss":"`+jwtIssuer+`","aud":"`+jwtAudience+`"}`)) + "."
	// HS256 signed with the RSA key's public modulus as the secret: a
	// gateway that took the JWKS key as an HMAC secret would accept it.
	confused := jwttest.SignHS256(t, []byte(s.rsa.JWK()["n"]), jwtClaims("u", "app-1"))
	runJWTSteps(t, g, []jwtStep{
		{name: "valid RS256", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app-1"))), want: 200, wantApp: "app-1"},
		{name: "valid ES256", hdr: bearer(s.ec.Sign(t, jwtClaims("u", "app-1"))), want: 200, wantApp: "app-1"},
		{name: "no token", want: 401, wantErr: "missing_token", wantMsg: "azp claim of a bearer token in the Authorization header"},
		{name: "basic auth is no token", hdr: []string{"Authorization", "Basic dTpw"}, want: 401, wantErr: "missing_token"},
		{name: "expired", hdr: bearer(s.rsa.Sign(t, jwttest.Claims(t0.Add(-2*time.Hour), time.Hour, "u", "azp", "app-1", "iss", jwtIssuer, "aud", jwtAudience))), want: 401, wantErr: "invalid_token", wantMsg: "expired"},
		{name: "not yet valid", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app-1", "nbf", t0.Add(time.Hour).Unix()))), want: 401, wantErr: "invalid_token", wantMsg: "not valid yet"},
		{name: "wrongly signed", hdr: bearer(forged.Sign(t, jwtClaims("u", "app-1"))), want: 401, wantErr: "invalid_token", wantMsg: "signature is invalid"},
		{name: "wrong audience", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app-1", "aud", "another"))), want: 401, wantErr: "invalid_token", wantMsg: "audience"},
		{name: "wrong issuer", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app-1", "iss", "https://evil.example"))), want: 401, wantErr: "invalid_token", wantMsg: "issuer"},
		{name: "alg none", hdr: bearer(none), want: 401, wantErr: "invalid_token", wantMsg: `algorithm "none" is not allowed`},
		{name: "HS256 with the RSA public key", hdr: bearer(confused), want: 401, wantErr: "invalid_token", wantMsg: `algorithm "HS256" is not allowed`},
		{name: "unknown kid", hdr: bearer(other.Sign(t, jwtClaims("u", "app-1"))), want: 401, wantErr: "invalid_token", wantMsg: `no key in the JWKS has kid "rsa-other"`},
		{name: "malformed", hdr: bearer("abc.def"), want: 401, wantErr: "invalid_token", wantMsg: "malformed"},
		{name: "sent twice", hdr: append(bearer(s.rsa.Sign(t, jwtClaims("u", "app-1"))), bearer(s.rsa.Sign(t, jwtClaims("u", "app-1")))...), want: 401, wantErr: "invalid_token", wantMsg: "sent more than once"},
		{name: "no azp", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", ""))), want: 401, wantErr: "invalid_token", wantMsg: "no azp claim"},
		{name: "azp not an app ID", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app 1"))), want: 401, wantErr: "invalid_token", wantMsg: "azp claim is not an app ID"},
		{name: "azp a list", hdr: bearer(s.rsa.Sign(t, jwtClaims("u", "app-1", "azp", []string{"app-1"}))), want: 401, wantErr: "invalid_token", wantMsg: "azp claim is not a string"},
	})
	if got := g.obs.last().Decision; got != observe.DecisionUnauthorized {
		t.Errorf("decision of a refused token: got %v, want %v", got, observe.DecisionUnauthorized)
	}
}

// TestJWTAppFromClaim checks that with the app ID from a claim, the app
// header is ignored (the request counts under the token's app) and
// removed (or, with ForwardAppHeader, replaced by the verified app ID).
func TestJWTAppFromClaim(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - {api: /v1/user, limit: 2, unit: 1m}
  - appId: app-2
    limits:
      - {api: /v1/user, limit: 100, unit: 1m}
`
	for _, forward := range []bool{false, true} {
		s := newJWTSetup(t, 0)
		g := newGW(t, rules, withJWT(s.v, "azp"), func(c *HandlerConfig, _ *UpstreamConfig) { c.ForwardAppHeader = forward })
		tok := s.ec.Sign(t, jwtClaims("u", "app-1"))
		hdr := append(bearer(tok), "X-App-Id", "app-2", "X_App_Id", "app-2")
		runJWTSteps(t, g, []jwtStep{
			{name: "1st", hdr: hdr, want: 200, wantApp: "app-1"},
			{name: "2nd", hdr: hdr, want: 200, wantApp: "app-1"},
			{name: "3rd: app-1's limit, whatever the header says", hdr: hdr, want: 429, wantErr: "rate_limited", wantApp: "app-1"},
			{name: "an invalid app header is ignored too", hdr: append(bearer(tok), "X-App-Id", "bad id!"), want: 429, wantErr: "rate_limited"},
		})
		g.up.mu.Lock()
		for i, h := range g.up.hdrs {
			want := ""
			if forward {
				want = "app-1"
			}
			if got := strings.Join(h.Values("X-App-Id"), ","); got != want {
				t.Errorf("forward %v, request %d: upstream got X-App-Id %q, want %q", forward, i, got, want)
			}
			if h.Get("X_App_Id") != "" {
				t.Errorf("forward %v, request %d: upstream got X_App_Id", forward, i)
			}
			if h.Get("Authorization") != "Bearer "+tok {
				t.Errorf("forward %v, request %d: the token was not forwarded", forward, i)
			}
		}
		if len(g.up.hdrs) != 2 {
			t.Errorf("forward %v: upstream got %d requests, want 2", forward, len(g.up.hdrs))
		}
		g.up.mu.Unlock()
		if got := g.obs.last().AppID; got != "app-1" {
			t.Errorf("outcome AppID: got %q, want app-1", got)
		}
	}
}

// TestJWTClaimKeys checks by: claim:sub through the real handler, with
// the app ID from the app header: one counter per subject; a request
// without a token follows missing; a bad token gets 401.
func TestJWTClaimKeys(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        by: claim:sub
        limit: 2
        unit: 1m
      - api: /v1/strict
        by: [claim:sub]
        missing: deny
        limit: 2
        unit: 1m
`
	s := newJWTSetup(t, 0)
	g := newGW(t, rules, withJWT(s.v, ""))
	tok := func(sub string) []string {
		return append(bearer(s.rsa.Sign(t, jwtClaims(sub, "x"))), "X-App-Id", "app-1")
	}
	app := []string{"X-App-Id", "app-1"}
	runJWTSteps(t, g, []jwtStep{
		{name: "alice 1", hdr: tok("alice"), want: 200, wantApp: "app-1"},
		{name: "alice 2", hdr: tok("alice"), want: 200},
		{name: "alice 3", hdr: tok("alice"), want: 429, wantErr: "rate_limited"},
		{name: "alice, a new token", hdr: tok("alice"), want: 429, wantErr: "rate_limited"},
		{name: "bob", hdr: tok("bob"), want: 200},
		// Escaped as header values are: "a|b" and "a%7Cb" are two
		// subjects with two counters.
		{name: "a|b 1", hdr: tok("a|b"), want: 200},
		{name: "a|b 2", hdr: tok("a|b"), want: 200},
		{name: "a%7Cb", hdr: tok("a%7Cb"), want: 200},
		// Without the claim, one counter per client address: shared by
		// a token without sub and no token at all.
		{name: "no sub: missing ip", hdr: append(bearer(s.rsa.Sign(t, jwtClaims("", "x"))), app...), want: 200},
		{name: "no token: missing ip", hdr: app, want: 200},
		{name: "no token: missing ip, 3rd from the address", hdr: app, want: 429, wantErr: "rate_limited"},
		{name: "bad token", hdr: append(bearer("x.y.z"), app...), want: 401, wantErr: "invalid_token", wantMsg: "malformed"},
		{name: "expired token", hdr: append(bearer(s.rsa.Sign(t, jwttest.Claims(t0.Add(-3*time.Hour), time.Hour, "carol"))), app...), want: 401, wantErr: "invalid_token", wantMsg: "expired"},
	})
	r := httptest.NewRequest("GET", "/v1/strict", nil)
	r.Header.Set("X-App-Id", "app-1")
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"missing_key"`) || !strings.Contains(w.Body.String(), "token claim sub") {
		t.Errorf("missing: deny without a token: got %d %s, want 400 missing_key naming the claim", w.Code, w.Body)
	}
	// /top and the observers see the subject, not a query parameter or
	// the address the claim rule did not count by.
	r = httptest.NewRequest("GET", "/v1/user?sub=mallory", nil)
	for i := 0; i+1 < len(tok("dave")); i += 2 {
		r.Header.Set(tok("dave")[i], tok("dave")[i+1])
	}
	g.h.ServeHTTP(httptest.NewRecorder(), r)
	last := g.obs.last()
	if ls := last.Limits(); len(ls) != 1 || ls[0].Key != "dave" {
		t.Errorf("the outcome's key of a claim:sub limit: got %+v, want the subject dave", ls)
	}
}

// BenchmarkHandlerJWT is BenchmarkHandler's admitted request with the app
// ID from the token's azp and the rule keyed by: claim:sub, next to the
// same request by: app; cached verifies a token once, uncached every
// request.
func BenchmarkHandlerJWT(b *testing.B) {
	const byApp = `
configs:
  - appId: app-1
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        limit: 1000000000
`
	const bySub = `
configs:
  - appId: app-1
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        by: claim:sub
        limit: 1000000000
`
	s := newJWTSetup(b, 0)
	uncached, err := jwtauth.New(jwtauth.Config{Keys: s.keys, Issuer: jwtIssuer, Audience: jwtAudience, CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	claims := jwttest.Claims(now, time.Hour, "user-42", "azp", "app-1", "iss", jwtIssuer, "aud", jwtAudience)
	for _, bc := range []struct {
		name  string
		rules string
		v     *jwtauth.Verifier
		key   *jwttest.Key
	}{
		{name: "by-app", rules: byApp},
		{name: "jwt-cached-RS256", rules: bySub, v: s.v, key: s.rsa},
		{name: "jwt-cached-ES256", rules: bySub, v: s.v, key: s.ec},
		{name: "jwt-uncached-RS256", rules: bySub, v: uncached, key: s.rsa},
		{name: "jwt-uncached-ES256", rules: bySub, v: uncached, key: s.ec},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := bc.v
			var opts []func(*HandlerConfig)
			auth := []string{}
			if v != nil {
				opts = append(opts, func(c *HandlerConfig) { c.JWT, c.AppClaim = v, "azp" })
				auth = []string{"Bearer " + bc.key.Sign(b, claims)}
			}
			h := benchHandler(b, bc.rules, opts...)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/v1/user/42", nil)
				app := []string{"app-1"}
				for pb.Next() {
					w := httptest.NewRecorder()
					r.URL.Path = "/v1/user/42"
					if v == nil {
						r.Header["X-App-Id"] = app
					} else {
						r.Header["Authorization"] = auth
					}
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("got %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
