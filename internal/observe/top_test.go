package proxy

import (
	"fmt"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// withTop adds top to a test gateway's observers.
func withTop(top *Top) gwOption {
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
	top := NewTop(TopConfig{})
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

// TestTopFlood feeds a million distinct keys with a few heavy hitters
// among them: memory stays at the sketch's bound, and the heavy hitters
// are listed first.
func TestTopFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a million requests")
	}
	const (
		distinct = 1_000_000
		heavy    = 5
	)
	top := NewTop(TopConfig{})
	o := &Outcome{Start: t0, n: 1}
	o.limits[0] = LimitOutcome{App: "app-1", API: "/v1/profile", By: "header:X-User-Id", Allowed: true}
	heapAt := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var base uint64
	for i := range distinct {
		if i == distinct/10 {
			base = heapAt()
		}
		// Each heavy hitter sends one request in 25, 4% of the traffic:
		// above the 1/k = 3.1% every listed key is guaranteed.
		if i%5 == 0 {
			o.limits[0].Key = "heavy-" + strconv.Itoa(i/5%heavy)
			o.limits[0].Allowed = false
		} else {
			o.limits[0].Key = "flood-" + strconv.Itoa(i)
			o.limits[0].Allowed = true
		}
		top.ObserveRequest(nil, o)
	}
	// From 100,000 keys to a million the sketch holds the same k
	// entries: allow 256 KiB for the runtime's own noise.
	if grew := int64(heapAt()) - int64(base); grew > 256<<10 {
		t.Errorf("heap grew by %d bytes from 100,000 to %d distinct keys, want it flat", grew, distinct)
	}
	snap := top.Snapshot(t0, "")
	if len(snap) != 1 {
		t.Fatalf("got %d limits, want 1", len(snap))
	}
	keys := snap[0].Keys
	if len(keys) != DefaultTopK {
		t.Errorf("got %d keys, want k = %d", len(keys), DefaultTopK)
	}
	for i := range heavy {
		k := keys[i]
		if !strings.HasPrefix(k.Key, "heavy-") {
			t.Fatalf("key %d: got %q, want the heavy hitters first (%v)", i, k.Key, keys[:heavy+1])
		}
		const truth = distinct / 5 / heavy
		if k.Count < truth || k.Count-k.Error > truth {
			t.Errorf("%s: count %d error %d do not bound the true %d", k.Key, k.Count, k.Error, truth)
		}
		if k.Limited == 0 || k.Admitted != 0 {
			t.Errorf("%s: admitted %d limited %d, want only limited", k.Key, k.Admitted, k.Limited)
		}
	}
	if snap[0].Requests != distinct {
		t.Errorf("requests: got %d, want %d", snap[0].Requests, distinct)
	}
}

// TestTopIgnoresOneCounterLimits checks that limits by app or global,
// which have one counter, are not ranked.
func TestTopIgnoresOneCounterLimits(t *testing.T) {
	t.Parallel()
	top := NewTop(TopConfig{})
	for _, by := range []config.By{"", config.ByApp, config.ByGlobal} {
		o := &Outcome{Start: t0, n: 1}
		o.limits[0] = LimitOutcome{App: "app-1", API: "/", By: by, Allowed: true}
		top.ObserveRequest(nil, o)
	}
	if n := len(top.Snapshot(t0, "")); n != 0 {
		t.Errorf("got %d limits, want 0", n)
	}
}
