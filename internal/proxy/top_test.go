package proxy

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// withTop adds top to a test gateway's observers.
func withTop(top *observe.Top) gwOption {
	return func(h *HandlerConfig, _ *UpstreamConfig) { h.Observers = append(h.Observers, top) }
}

// TestTopKeys sends requests through the handler and checks what Top
// lists per limit: the raw values the operator configured, not the
// escaped counter keys, with admitted and limited counts.
func TestTopKeys(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limit: 1000
    unit: 1m
    limits:
      - api: /user
        by: header:X-User-Id
        limit: 2
        unit: 1m
      - api: /query
        by: query:tenant
        missing: share
        limit: 100
        unit: 1m
      - api: /pair
        by: [ip, header:X-User-Id]
        limit: 100
        unit: 1m
      - api: /ip
        by: ip
        limit: 100
        unit: 1m
      - api: /fallback
        by: header:X-User-Id
        limit: 100
        unit: 1m
`
	top := observe.NewTop(observe.TopConfig{RawKeys: true})
	g := newGW(t, rules, withTop(top))
	send := func(target, ip, user string, n int) {
		t.Helper()
		for range n {
			r := httptest.NewRequest("GET", target, nil)
			r.RemoteAddr = ip + ":4321"
			r.Header.Set("X-App-Id", "app-1")
			if user != "" {
				r.Header.Set("X-User-Id", user)
			}
			g.h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	send("/user", "203.0.113.1", "alice|{x}", 5) // 2 admitted, 3 limited
	send("/user", "203.0.113.1", "bob", 1)
	send("/query?tenant=a%20b", "203.0.113.1", "", 3)
	send("/query", "203.0.113.1", "", 1) // missing: share
	send("/pair", "203.0.113.9", "carol", 2)
	send("/ip", "203.0.113.7", "", 4)
	send("/fallback", "203.0.113.8", "", 1) // missing: counted by ip
	// A user whose header is that address is another key.
	send("/fallback", "203.0.113.8", "203.0.113.8", 2)

	got := map[string]string{}
	for _, l := range top.Snapshot(t0, "") {
		var b strings.Builder
		for _, k := range l.Keys {
			missing := ""
			if k.Missing {
				missing = "(missing)"
			}
			fmt.Fprintf(&b, "%q%s:%d/%d/%d ", k.Key, missing, k.Count, k.Admitted, k.Limited)
		}
		got[l.API+" by "+string(l.By)] = strings.TrimSpace(b.String())
	}
	want := map[string]string{
		"/user by header:X-User-Id":     `"alice|{x}":5/2/3 "bob":1/1/0`,
		"/query by query:tenant":        `"a b":3/3/0 "":1/1/0`,
		"/pair by ip,header:X-User-Id":  `"203.0.113.9, carol":2/2/0`,
		"/ip by ip":                     `"203.0.113.7":4/4/0`,
		"/fallback by header:X-User-Id": `"203.0.113.8":2/2/0 "203.0.113.8"(missing):1/1/0`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("limits listed: got %v, want only those of %v (the app total is by app)", got, want)
	}
	if n := len(top.Snapshot(t0, "app-2")); n != 0 {
		t.Errorf("app-2: got %d limits, want 0", n)
	}
	if n := len(top.Snapshot(t0.Add(3*time.Minute), "")); n != 0 {
		t.Errorf("three minutes on: got %d limits, want 0", n)
	}
}
