package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/redisstoretest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// keyStores are the stores the keyed-limit tests run on.
var keyStores = []string{"memory", "redis"}

// newKeyedGW returns a gateway with rules on the named store: memory, or
// a Redis of its own that decides at one fixed instant (exact counts,
// however slow the machine).
func newKeyedGW(t *testing.T, store, rules string) *gw {
	t.Helper()
	if store == "memory" {
		return newGW(t, rules)
	}
	srv := redistest.Start(t) // skips with -short
	return newRedisGW(t, rules, srv, failmode.Closed, 5*time.Second,
		func(c *redisstore.Config) { *c = redisstoretest.WithDecisionClock(*c, func() time.Time { return t0 }) }).gw
}

// keyStep is one request of a keyed-limit test, sent n times (1 if 0).
type keyStep struct {
	ip, target string
	hdr        []string // name, value pairs
	n          int
	want       int    // status
	wantErr    string // the error code of a refused request
	wantAPI    string // the "api" of a 429 body: "" for the app total
}

// runKeySteps sends the steps through g, from app-1, and reports the
// first request of each step that does not get what it wants.
func runKeySteps(t *testing.T, g *gw, steps []keyStep) {
	t.Helper()
	for i, s := range steps {
		for j := range max(s.n, 1) {
			r := httptest.NewRequest("GET", s.target, nil)
			r.RemoteAddr = cmpOr(s.ip, "203.0.113.1") + ":4321"
			r.Header.Set("X-App-Id", "app-1")
			for k := 0; k+1 < len(s.hdr); k += 2 {
				r.Header.Add(s.hdr[k], s.hdr[k+1])
			}
			w := httptest.NewRecorder()
			g.h.ServeHTTP(w, r)
			if w.Code != s.want {
				t.Fatalf("step %d (%s %v from %s), request %d: got %d, want %d (body %s)", i, s.target, s.hdr, s.ip, j+1, w.Code, s.want, w.Body)
			}
			if w.Code == 200 {
				continue
			}
			var body struct{ Error, API, Message string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("step %d: body is not JSON: %s", i, w.Body)
			}
			want := s.wantErr
			if w.Code == http.StatusTooManyRequests {
				want = "rate_limited"
				if body.API != s.wantAPI {
					t.Errorf("step %d: 429 by api %q, want %q", i, body.API, s.wantAPI)
				}
			}
			if body.Error != want {
				t.Errorf("step %d: error %q, want %q (message %q)", i, body.Error, want, body.Message)
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestKeyedLimits runs limits keyed on headers, query parameters and
// combinations, with each missing mode, through the real handler on both
// stores.
func TestKeyedLimits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("u", ruleset.MaxKeyValueLen)
	tests := []struct {
		name  string
		rules string
		steps []keyStep
	}{
		{
			// Two users each get the rule's full limit; the app total
			// still caps them together.
			name: "per user inside one app",
			rules: `
configs:
  - appId: app-1
    limit: 15
    unit: 1h
    limits:
      - api: /v1/user
        by: header:X-User-Id
        limit: 10
        unit: 1h
`,
			steps: []keyStep{
				{target: "/v1/user", hdr: []string{"X-User-Id", "alice"}, n: 10, want: 200},
				{target: "/v1/user", hdr: []string{"X-User-Id", "alice"}, want: 429, wantAPI: "/v1/user"},
				{target: "/v1/user", hdr: []string{"x-user-id", "bob"}, n: 5, want: 200},
				{target: "/v1/user", hdr: []string{"X-User-Id", "bob"}, want: 429, wantAPI: ""},
			},
		},
		{
			name: "query parameter",
			rules: `
configs:
  - appId: app-1
    limits:
      - api: /v1/search
        by: query:user
        missing: deny
        limit: 2
        unit: 1h
`,
			steps: []keyStep{
				{target: "/v1/search?user=a&q=x", n: 2, want: 200},
				{target: "/v1/search?q=y&user=a", want: 429, wantAPI: "/v1/search"},
				{target: "/v1/search?us%65r=%61", want: 429, wantAPI: "/v1/search"}, // the same name and value, escaped
				{target: "/v1/search?user=b", n: 2, want: 200},
				{target: "/v1/search?username=c", want: 400, wantErr: "missing_key"},
				{target: "/v1/search?user=", want: 400, wantErr: "missing_key"},
				{target: "/v1/search?user=c&user=d", want: 400, wantErr: "invalid_key"},
				{target: "/v1/search?user=%zz", want: 400, wantErr: "invalid_key"},
			},
		},
		{
			name: "combination",
			rules: `
configs:
  - appId: app-1
    limits:
      - api: /v1/pair
        by: [ip, header:X-User-Id]
        limit: 1
        unit: 1h
`,
			steps: []keyStep{
				{ip: "203.0.113.1", target: "/v1/pair", hdr: []string{"X-User-Id", "a"}, want: 200},
				{ip: "203.0.113.1", target: "/v1/pair", hdr: []string{"X-User-Id", "a"}, want: 429, wantAPI: "/v1/pair"},
				{ip: "203.0.113.2", target: "/v1/pair", hdr: []string{"X-User-Id", "a"}, want: 200},
				{ip: "203.0.113.1", target: "/v1/pair", hdr: []string{"X-User-Id", "b"}, want: 200},
			},
		},
		{
			name: "missing ip",
			rules: `
configs:
  - appId: app-1
    limits:
      - api: /v1/x
        by: header:X-User-Id
        limit: 1
        unit: 1h
`,
			steps: []keyStep{
				{ip: "203.0.113.1", target: "/v1/x", want: 200},
				{ip: "203.0.113.1", target: "/v1/x", hdr: []string{"X-User-Id", ""}, want: 429, wantAPI: "/v1/x"},
				{ip: "203.0.113.2", target: "/v1/x", want: 200},
				// A value equal to the client address group is not the
				// group's counter.
				{ip: "203.0.113.1", target: "/v1/x", hdr: []string{"X-User-Id", "203.0.113.1"}, want: 200},
			},
		},
		{
			name: "missing share",
			rules: `
configs:
  - appId: app-1
    limits:
      - api: /v1/x
        by: header:X-User-Id
        missing: share
        limit: 1
        unit: 1h
`,
			steps: []keyStep{
				{ip: "203.0.113.1", target: "/v1/x", want: 200},
				{ip: "203.0.113.2", target: "/v1/x", want: 429, wantAPI: "/v1/x"},
				{ip: "203.0.113.3", target: "/v1/x", hdr: []string{"X-User-Id", "!"}, want: 200},
				{ip: "203.0.113.3", target: "/v1/x", hdr: []string{"X-User-Id", "a"}, want: 200},
			},
		},
		{
			name: "missing deny and bad values",
			rules: `
defaults:
  missing: deny
configs:
  - appId: app-1
    limits:
      - api: /v1/x
        by: header:X-User-Id
        limit: 2
        unit: 1h
`,
			steps: []keyStep{
				{target: "/v1/x", want: 400, wantErr: "missing_key"},
				{target: "/v1/x", hdr: []string{"X-User-Id", long}, n: 2, want: 200},
				{target: "/v1/x", hdr: []string{"X-User-Id", long + "u"}, want: 400, wantErr: "invalid_key"},
				{target: "/v1/x", hdr: []string{"X-User-Id", strings.Repeat("x", 10<<10)}, want: 400, wantErr: "invalid_key"},
				{target: "/v1/x", hdr: []string{"X-User-Id", "a", "X-User-Id", "b"}, want: 400, wantErr: "invalid_key"},
			},
		},
	}
	for _, tt := range tests {
		for _, store := range keyStores {
			t.Run(tt.name+"/"+store, func(t *testing.T) {
				t.Parallel()
				runKeySteps(t, newKeyedGW(t, store, tt.rules), tt.steps)
			})
		}
	}
}

// collisionRules key one rule on a header, next to a per-IP rule and
// another app whose keys the values imitate.
const collisionRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/a
        by: query:u
        limit: 1
        unit: 1h
      - api: /v1/c
        by: header:X-User-Id
        limit: 1
        unit: 1h
      - api: /v1/b
        by: ip
        limit: 1
        unit: 1h
  - appId: app-2
    limits:
      - api: /v1/a
        limit: 1
        unit: 1h
`

// collisionValues are header values built to break or imitate keys:
// separators, braces (Redis hash tags), NUL, escapes of one another, a
// client address group, the overflow key's suffix, another rule's and
// another app's keys, and values long enough to be digested.
var collisionValues = []string{
	"a", "|", "||", "a|b", "{", "}", "{app-1}", "{app-2}", "a\x00b", "\x00",
	"%7C", "%7c", "%257C", "=", "=a", "!", "#", ",", "a,b",
	"203.0.113.1", "overflow", "|overflow", "=overflow",
	"app-2|/v1/a", "app-1|/v1/b|203.0.113.1", "/v1/b|203.0.113.1", "app-1|/v1/a",
	strings.Repeat("|", 100), strings.Repeat("%7C", 80), strings.Repeat("z", 200), strings.Repeat("z", 201),
	"é", "\xff", " ", "\t",
}

// TestKeyedValuesNeverCollide sends every collision value twice to a
// limit of 1 on both stores, as a query parameter and, when net/http
// would let it through, as a header: each value's first request is admitted
// (no other value's counter, nor another rule's or app's, was used) and
// its second limited (the value has one counter of its own). The values
// never reach a metric label, and on Redis every key keeps the app as its
// only hash tag.
func TestKeyedValuesNeverCollide(t *testing.T) {
	t.Parallel()
	for _, store := range keyStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := observe.NewMetrics(observe.MetricsConfig{Registry: reg, Store: store, Version: "test"})
			var red *redistest.Server
			var g *gw
			if store == "memory" {
				g = newGW(t, collisionRules, func(h *HandlerConfig, _ *UpstreamConfig) { h.Observers = append(h.Observers, m) })
			} else {
				red = redistest.Start(t)
				rg := newRedisGW(t, collisionRules, red, failmode.Closed, 5*time.Second,
					func(c *redisstore.Config) { *c = redisstoretest.WithDecisionClock(*c, func() time.Time { return t0 }) })
				rg.h.observers = append(rg.h.observers, m)
				g = rg.gw
			}
			// First the counters the values imitate: app-1's per-IP rule,
			// app-2's rule, and app-1's /v1/a for a caller without the
			// header (counted per client address).
			steps := []keyStep{
				{ip: "203.0.113.1", target: "/v1/b", want: 200},
				{ip: "203.0.113.1", target: "/v1/a", want: 200},
			}
			nkeys := 3 // the two per-IP counters and app-2's
			for _, v := range collisionValues {
				q := "/v1/a?u=" + url.QueryEscape(v)
				steps = append(steps,
					keyStep{ip: "203.0.113.1", target: q, want: 200},
					keyStep{ip: "203.0.113.2", target: q, want: 429, wantAPI: "/v1/a"})
				nkeys++
				if !strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }) && strings.TrimSpace(v) != "" {
					steps = append(steps,
						keyStep{ip: "203.0.113.1", target: "/v1/c", hdr: []string{"X-User-Id", v}, want: 200},
						keyStep{ip: "203.0.113.2", target: "/v1/c", hdr: []string{"X-User-Id", v}, want: 429, wantAPI: "/v1/c"})
					nkeys++
				}
			}
			runKeySteps(t, g, steps)
			r := httptest.NewRequest("GET", "/v1/a", nil)
			r.Header.Set("X-App-Id", "app-2")
			r.Header.Set("X-User-Id", "x")
			w := httptest.NewRecorder()
			if g.h.ServeHTTP(w, r); w.Code != 200 {
				t.Errorf("app-2's /v1/a after app-1's values: got %d, want 200", w.Code)
			}

			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, met := range mf.GetMetric() {
					for _, l := range met.GetLabel() {
						if v := l.GetValue(); v != "" && slices.Contains(collisionValues, v) && v != "a" {
							t.Errorf("metric %s has a label %s=%q, a header value", mf.GetName(), l.GetName(), v)
						}
					}
				}
			}

			var keys []string
			if red == nil {
				g.h.failover.Store().(*limit.Memory).Forget(func(k string) bool { keys = append(keys, k); return true })
			} else {
				keys, err = red.Client().Keys(t.Context(), "gw:*").Result()
				if err != nil {
					t.Fatal(err)
				}
				// The replies Redis keeps of calls for a while, so that a
				// call sent again runs once, are not counters.
				keys = slices.DeleteFunc(keys, func(k string) bool {
					return strings.Contains(k, "}#done:")
				})
				for _, k := range keys {
					tag := k[strings.IndexByte(k, '{')+1 : strings.IndexByte(k, '}')]
					if (tag != "app-1" && tag != "app-2" && tag != limit.CallerTag("203.0.113.1")) || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
						t.Errorf("redis key %q: hash tag %q, or a brace in a value", k, tag)
					}
				}
			}
			if got, want := len(keys), nkeys; got != want {
				t.Errorf("%d keys, want %d: %q", got, want, keys)
			}
			rs := g.h.Rules()
			for _, k := range keys {
				if red == nil && !rs.OwnsKey(k) {
					t.Errorf("key %q is not owned by the rules (a reload would drop it)", k)
				}
			}
		})
	}
}

// TestKeyedFloodStaysWithinMaxKeys floods a per-user limit with 100,000
// distinct header values: the memory store never holds more than
// --max-keys and the overflow counter, and the users past the cap share
// the overflow counter's limit, as per-IP keys do.
func TestKeyedFloodStaysWithinMaxKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the flood sends 100,000 requests")
	}
	t.Parallel()
	const maxKeys, n = 1000, 100_000
	store, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        by: header:X-User-Id
        limit: 3
        unit: 1h
`, func(h *HandlerConfig, _ *UpstreamConfig) { h.Store = store; h.Observers = nil })
	admitted := 0
	for i := range n {
		r := httptest.NewRequest("GET", "/v1/user", nil)
		r.Header.Set("X-App-Id", "app-1")
		r.Header.Set("X-User-Id", fmt.Sprintf("user-%d", i))
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		if w.Code == 200 {
			admitted++
		}
		if got := store.Len(); got > maxKeys+1 {
			t.Fatalf("request %d: %d keys, more than --max-keys %d and the overflow key", i, got, maxKeys)
		}
	}
	// maxKeys users with a counter each, then 3 admitted by the shared
	// overflow counter.
	if want := maxKeys + 3; admitted != want {
		t.Errorf("admitted %d, want %d", admitted, want)
	}
	found := false
	store.Forget(func(k string) bool { found = found || k == "app-1|/v1/user|overflow"; return true })
	if !found {
		t.Errorf("no overflow key app-1|/v1/user|overflow")
	}
}
