package proxy

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// TestAccessLogKeys checks the key fields of access lines: the hash of
// each header and query value a limit counted by, once per part, or the
// value itself with raw keys; nothing for a missing value or a limit by
// app or ip.
func TestAccessLogKeys(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    by: header:X-User-Id
    limit: 1000
    unit: 1m
    limits:
      - api: /pair
        by: [ip, header:X-User-Id, query:tenant]
        limit: 100
        unit: 1m
      - api: /app
        by: app
        limit: 100
        unit: 1m
`
	for _, tc := range []struct {
		name   string
		raw    bool
		target string
		user   string
		want   map[string]string // key fields
	}{
		{name: "hashed", target: "/pair?tenant=a%26b", user: "alice", want: map[string]string{
			"key_hash.header:X-User-Id": observe.KeyHash("alice"), "key_hash.query:tenant": observe.KeyHash("a&b"),
		}},
		{name: "raw", raw: true, target: "/pair?tenant=a%26b", user: "alice", want: map[string]string{
			"key.header:X-User-Id": "alice", "key.query:tenant": "a&b",
		}},
		{name: "missing value", target: "/pair", user: "alice", want: map[string]string{
			"key_hash.header:X-User-Id": observe.KeyHash("alice"),
		}},
		{name: "the total keyed, the rule by app", target: "/app", user: "bob", want: map[string]string{
			"key_hash.header:X-User-Id": observe.KeyHash("bob"),
		}},
		{name: "nothing keyed", target: "/app", want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf gwtest.Log
			al := observe.NewAccessLog(&buf, nil)
			al.SetRawKeys(tc.raw)
			g := newGW(t, rules, withObserver(al))
			r := httptest.NewRequest("GET", tc.target, nil)
			r.Header.Set("X-App-Id", "app-1")
			if tc.user != "" {
				r.Header.Set("X-User-Id", tc.user)
			}
			g.h.ServeHTTP(httptest.NewRecorder(), r)
			sc := bufio.NewScanner(strings.NewReader(buf.String()))
			if !sc.Scan() {
				t.Fatal("no access line")
			}
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("not a JSON line: %s", sc.Text())
			}
			got := map[string]string{}
			for k, v := range line {
				if strings.HasPrefix(k, observe.KeyHashField) || strings.HasPrefix(k, observe.KeyValueField) {
					got[k], _ = v.(string)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("key fields: got %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s: got %q, want %q", k, got[k], w)
				}
			}
		})
	}
	if h := observe.KeyHash("alice"); len(h) != observe.KeyHashLen || strings.Trim(h, "0123456789abcdef") != "" {
		t.Errorf("observe.KeyHash: got %q, want %d hex digits", h, observe.KeyHashLen)
	}
}

// withObserver adds obs to a test gateway's observers.
func withObserver(obs observe.Observer) gwOption {
	return func(h *HandlerConfig, _ *UpstreamConfig) { h.Observers = append(h.Observers, obs) }
}
