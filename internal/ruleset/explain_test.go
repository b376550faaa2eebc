package ruleset

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
)

var t0 = gwtest.T0

// keyRules gives app-k two keys and a limit of 2; app-1 has no keys.
var keyRules = `
configs:
  - appId: app-k
    keys:
      - ` + digest("first-key") + `
      - ` + digest("second-key") + `
    limits:
      - api: /v1
        limit: 2
        unit: 10
  - appId: app-1
    limits:
      - api: /v1
        limit: 2
        unit: 10
  - appId: "*"
    limits:
      - api: /
        limit: 1
        unit: 10
`

// digest is the sha256 of an API key in hex, as a rule file lists it.
func digest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// planRules give two apps the plan gold; acme overrides one of its rules.
const planRules = `plans:
  - name: gold
    limits:
      - {api: /v1/chat, limit: %CHAT%, unit: 60, algorithm: fixed_window}
      - {api: /v1/search, limit: 1, unit: 60, algorithm: fixed_window}
configs:
  - appId: acme
    plan: gold
    limits:
      - {api: /v1/search, limit: 3, unit: 60, algorithm: fixed_window}
  - appId: bob
    plan: gold
`

// compile parses and compiles rules, failing the test on an error.
func compile(t testing.TB, rules string) *Set {
	t.Helper()
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestExplainKeys(t *testing.T) {
	t.Parallel()
	rs := compile(t, keyRules)
	got, err := rs.Explain("app-k", "GET", "/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "requires an API key: one of the app's 2 key(s)") {
		t.Errorf("Explain(app-k) does not say a key is required:\n%s", got)
	}
	if got, _ := rs.Explain("app-1", "GET", "/v1/x"); strings.Contains(got, "API key") {
		t.Errorf("Explain(app-1) speaks of a key:\n%s", got)
	}
}

// TestConcurrencyExplain checks that gateway match shows each
// concurrency and the key it counts by.
func TestConcurrencyExplain(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    concurrency: 20
    limits:
      - api: /up
        concurrency: 2
        by: header:X-User-Id
`
	parsed, err := config.Parse("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile(parsed, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rs.ExplainRequest(ExplainRequest{App: "app-1", Method: "POST", Target: "/up", Header: http.Header{"X-User-Id": {"42"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"applies: app concurrency: at most 20 in flight",
		"applies: rule /up no rate limit, at most 2 in flight",
		"counted by header:X-User-Id (missing: ip): key app-1|/up|=42",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("explain: got\n%s\nwant it to contain %q", got, want)
		}
	}
}

// TestExplainShowsKeys checks that the match command's explanation names
// the counter key a request would get, or the 400 it would get instead.
func TestExplainShowsKeys(t *testing.T) {
	t.Parallel()
	rs := compile(t, `
configs:
  - appId: app-1
    limit: 10
    limits:
      - {api: /u, limit: 1, by: [ip, header:X-User-Id, query:q], missing: deny}
      - {api: /me, limit: 1, by: claim:sub}
  - appId: "*"
    limits:
      - {api: /, limit: 1}
`)
	tests := []struct {
		name string
		q    ExplainRequest
		want []string
	}{
		{
			name: "combination",
			q:    ExplainRequest{App: "app-1", Method: "GET", Target: "/u?q=a%7Cb", Header: http.Header{"X-User-Id": {"{x}"}}, ClientIP: netip.MustParseAddr("203.0.113.7")},
			want: []string{"counted by ip,header:X-User-Id,query:q (missing: deny): key app-1|/u|=203.0.113.7,%7Bx%7D,a%7Cb\n", "decision: admitted"},
		},
		{
			name: "missing",
			q:    ExplainRequest{App: "app-1", Method: "GET", Target: "/u?q=a"},
			want: []string{"refused with 400 missing_key: rule /u counts by the header X-User-Id", "decision: refused with 400"},
		},
		{
			name: "claim",
			q:    ExplainRequest{App: "app-1", Method: "GET", Target: "/me", Claims: map[string]string{"sub": "al|ce"}},
			want: []string{"counted by claim:sub (missing: ip): key app-1|/me|=al%7Cce\n"},
		},
		{
			name: "claim missing",
			q:    ExplainRequest{App: "app-1", Method: "GET", Target: "/me", ClientIP: netip.MustParseAddr("203.0.113.7")},
			want: []string{"counted by claim:sub (missing: ip): key app-1|/me|203.0.113.7\n"},
		},
		{
			name: "per ip",
			q:    ExplainRequest{Method: "GET", Target: "/x", ClientIP: netip.MustParseAddr("2001:db8::1")},
			want: []string{"counted per client address group: key *|/|2001:db8::/64\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := rs.ExplainRequest(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("ExplainRequest: got\n%s\nwant it to contain %q", got, w)
				}
			}
		})
	}
}

func TestExplainShowsPlan(t *testing.T) {
	t.Parallel()
	rs := compile(t, strings.ReplaceAll(planRules, "%CHAT%", "2"))
	out, err := rs.Explain("acme", "GET", "/v1/chat")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "applies: rule /v1/chat 2 per 1m0s") || !strings.Contains(out, "[from plan gold]") {
		t.Errorf("explain of a plan rule:\n%s\nwant the rule and its plan", out)
	}
	out, err = rs.Explain("acme", "GET", "/v1/search")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "3 per 1m0s") || strings.Contains(out, "from plan") {
		t.Errorf("explain of an override:\n%s\nwant acme's own rule of 3, not the plan's", out)
	}
}

func TestCompileRejectsBadShare(t *testing.T) {
	t.Parallel()
	rs := compile(t, gwtest.BasicRules)
	for _, share := range []float64{-0.1, 1.5} {
		if _, err := CompileWith(rs.Source, t0, CompileOptions{LocalShare: share}); err == nil {
			t.Errorf("CompileWith(share %v): got nil, want an error", share)
		}
	}
}

// TestCompileNoJWT checks that rules keyed on a claim are refused, naming
// the rule's file and line, when tokens are not verified.
func TestCompileNoJWT(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, rules, want string }{
		{"rule", "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n      - api: /x\n        by: claim:sub\n        limit: 1\n", "rules.yaml:6: rule /x counts by claim:sub"},
		{"total", "configs:\n  - appId: a\n    by: [ip, claim:sub]\n    limit: 5\n", "rules.yaml:2: app a's total counts by ip,claim:sub"},
		{"inherited", "configs:\n  - appId: a\n    by: claim:tenant\n    limits:\n      - api: /x\n        limit: 1\n", "rules.yaml:5: rule /x counts by claim:tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parsed, err := config.Parse("rules.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			_, err = CompileWith(parsed, t0, CompileOptions{NoJWT: true})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--jwt-jwks") {
				t.Errorf("CompileWith NoJWT: got %v, want %q and the flags", err, tt.want)
			}
			if _, err := CompileWith(parsed, t0, CompileOptions{}); err != nil {
				t.Errorf("CompileWith: got %v, want no error", err)
			}
		})
	}
}

func TestCheckAppID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{"app-1", true}, {"a.b_c:d-E9", true}, {string(make([]byte, 128)), false},
		{"", false}, {"app/1", false}, {"app 1", false}, {"ä", false},
	} {
		_, err := CheckAppID(tt.id)
		if got := err == nil; got != tt.ok {
			t.Errorf("CheckAppID(%q): ok %v, want %v (err %v)", tt.id, got, tt.ok, err)
		}
	}
	long := make([]byte, 128)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := CheckAppID(string(long)); err != nil {
		t.Errorf("128-byte ID: got %v, want ok", err)
	}
}

// FuzzAppID checks the app header validation: an accepted ID is one the
// rule file could configure.
func FuzzAppID(f *testing.F) {
	for _, s := range []string{"app-1", "", "a b", "ä", strings.Repeat("x", 129), "a.b_c:d-E9", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got, err := CheckAppID(id)
		if err != nil {
			return
		}
		if got != id || !config.ValidAppID(id) {
			t.Fatalf("accepted %q as %q, which the rule file would reject", id, got)
		}
	})
}
