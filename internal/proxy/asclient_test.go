package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestDecisionsReadTheRequestAsSent checks that limits keyed on headers
// and parameters the gateway removes before forwarding (the API key, the
// app header, a method override, X-Real-Ip) count by the values the
// client sent, while the upstream still does not receive them.
func TestDecisionsReadTheRequestAsSent(t *testing.T) {
	t.Parallel()
	rules := `
configs:
  - appId: app-k
    keys:
      - ` + digest("first-key") + `
      - ` + digest("second-key") + `
    limits:
      - api: /v1/key
        limit: 2
        unit: 1h
        by: header:X-Api-Key
      - api: /v1/app
        limit: 2
        unit: 1h
        by: header:X-App-Id
        missing: deny
      - api: /v1/override
        limit: 2
        unit: 1h
        by: header:X-HTTP-Method-Override
        missing: deny
      - api: /v1/param
        limit: 2
        unit: 1h
        by: query:_method
        missing: deny
`
	type req struct {
		path string
		hdr  []string
	}
	k1 := []string{"X-Api-Key", "first-key"}
	k2 := []string{"X-Api-Key", "second-key"}
	tests := []struct {
		name string
		reqs []req
		want string
	}{
		// Two keys of one app from one address: a counter each.
		{"by the API key", []req{{"/v1/key", k1}, {"/v1/key", k1}, {"/v1/key", k1}, {"/v1/key", k2}}, "200 200 429 200"},
		// The app header is present when the key is built.
		{"by the app header", []req{{"/v1/app", k1}, {"/v1/app", k1}, {"/v1/app", k1}}, "200 200 429"},
		// A GET's override is not forwarded, yet it was sent.
		{"by an override header", []req{
			{"/v1/override", append([]string{"X-HTTP-Method-Override", "a"}, k1...)},
			{"/v1/override", append([]string{"X-HTTP-Method-Override", "a"}, k1...)},
			{"/v1/override", append([]string{"X-HTTP-Method-Override", "a"}, k1...)},
			{"/v1/override", append([]string{"X-HTTP-Method-Override", "b"}, k1...)},
		}, "200 200 429 200"},
		{"by the _method parameter", []req{
			{"/v1/param?_method=a", k1}, {"/v1/param?_method=a", k1}, {"/v1/param?_method=a", k1}, {"/v1/param?_method=b", k1},
		}, "200 200 429 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, rules)
			var got []string
			for _, rq := range tt.reqs {
				w := g.do("GET", rq.path, "app-k", rq.hdr...)
				got = append(got, fmt.Sprint(w.Code))
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Errorf("statuses: got %s, want %s", s, tt.want)
			}
			paths, hdrs := g.up.seen(), func() []http.Header { _, h := g.up.saw(); return h }()
			for i, h := range hdrs {
				for _, name := range []string{"X-Api-Key", "X-App-Id", "X-Http-Method-Override"} {
					if v := h.Get(name); v != "" {
						t.Errorf("request %d: the upstream got %s: %q", i, name, v)
					}
				}
				if strings.Contains(paths[i], "_method") {
					t.Errorf("request %d: the upstream got %s", i, paths[i])
				}
			}
		})
	}
}

// TestKeyedHeaderAliasNotForwarded checks that a header spelling a keyed
// header with underscores, which the key counts as missing, is not
// forwarded: a CGI-style upstream would read it as the real header.
func TestKeyedHeaderAliasNotForwarded(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1
        unit: 1h
        by: header:X-User-Id
`)
	for i := range 3 {
		w := g.do("GET", "/v1/user", "app-1", "X_User_Id", fmt.Sprint("user-", i), "X_Other", "kept")
		if i == 0 && w.Code != http.StatusOK {
			t.Fatalf("first request: got %d, want 200", w.Code)
		}
	}
	_, hdrs := g.up.saw()
	if len(hdrs) == 0 {
		t.Fatal("nothing was forwarded")
	}
	for i, h := range hdrs {
		for k := range h {
			if sameUnderscored(k, "X-User-Id") {
				t.Errorf("request %d: the upstream got %s: %q", i, k, h[k])
			}
		}
		if h.Get("X_Other") != "kept" {
			t.Errorf("request %d: an unrelated underscore header was dropped: %v", i, h)
		}
	}
}

// TestSemicolonInAKeyedQuery checks that a query with a raw ';' is
// refused when a limit counts by a query parameter: an upstream that
// splits on ';' would serve every ?user=alice;n=i as alice, while the
// key would see a new user each time.
func TestSemicolonInAKeyedQuery(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 2
        unit: 1h
        by: query:user
      - api: /v1/other
        limit: 100
        unit: 1h
`)
	for i := 1; i <= 6; i++ {
		w := g.do("GET", fmt.Sprintf("/v1/user?user=alice;n=%d", i), "app-1")
		if w.Code != http.StatusBadRequest {
			t.Fatalf("request %d: got %d, want 400", i, w.Code)
		}
		if got := errorCode(t, w.Body.Bytes()); got != "invalid_query" {
			t.Errorf("request %d: error %q, want invalid_query", i, got)
		}
		if !strings.Contains(w.Body.String(), `"message"`) {
			t.Errorf("request %d: no message in %s", i, w.Body)
		}
	}
	var got []string
	for _, target := range []string{"/v1/user?user=alice&n=1", "/v1/user?user=alice&n=2", "/v1/user?user=alice&n=3", "/v1/user?user=bob%3Bn=4", "/v1/other?a=1;b=2"} {
		got = append(got, fmt.Sprint(g.do("GET", target, "app-1").Code))
	}
	if s, want := strings.Join(got, " "), "200 200 429 200 200"; s != want {
		t.Errorf("statuses: got %s, want %s", s, want)
	}
	if n := len(g.up.seen()); n != 4 {
		t.Errorf("the upstream got %d requests, want 4", n)
	}
}

// TestLimitedBodyHasAMessage checks that the limited response, like every
// response the gateway writes itself (docs/rules.md, "Responses"), has a message.
func TestLimitedBodyHasAMessage(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	var w interface{ Result() *http.Response }
	for range 3 {
		rec := g.do("GET", "/v1/user", "app-2")
		w = rec
		if rec.Code == http.StatusTooManyRequests {
			if got := errorCode(t, rec.Body.Bytes()); got != "rate_limited" {
				t.Errorf("error: got %q, want rate_limited", got)
			}
			return
		}
	}
	t.Fatalf("no request was limited: last %d", w.Result().StatusCode)
}
