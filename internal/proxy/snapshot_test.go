package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// keysSeen is an observer that keeps the key values of every outcome.
type keysSeen struct {
	mu   sync.Mutex
	keys [][]observe.KeyValue
}

func (k *keysSeen) ObserveRequest(o *observe.Outcome) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, slices.Clone(o.Keys()))
}

// TestObserversSeeTheValuesCounted checks that the counter, /top and the
// access log all report the key values the request was decided on, read
// once, even when the request is changed afterwards: here by a handler
// on the way to the upstream that rewrites the header and the query the
// limit counts by. Were any of them to read the request again after the
// decision, it would report "mallory".
func TestObserversSeeTheValuesCounted(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /pair
        by: [header:X-User-Id, query:tenant]
        limit: 2
        unit: 1m
`
	var logBuf gwtest.Log
	al := observe.NewAccessLog(&logBuf, nil)
	top := observe.NewTop(observe.TopConfig{})
	seen := &keysSeen{}
	g := newGW(t, rules, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Observers = append(h.Observers, al, top, seen)
	})
	forward := g.h.upstream
	g.h.upstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-User-Id", "mallory")
		r.URL.RawQuery = "tenant=mallory"
		forward.ServeHTTP(w, r)
	})
	var codes []int
	for range 3 {
		r := httptest.NewRequest("GET", "/pair?tenant=acme", nil)
		r.Header.Set("X-App-Id", "app-1")
		r.Header.Set("X-User-Id", "alice")
		w := httptest.NewRecorder()
		g.h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	// The counter: alice of acme, limited at her third request.
	if want := []int{200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses: got %v, want %v", codes, want)
	}
	if got := g.up.seen(); len(got) != 2 || !strings.Contains(got[0], "mallory") {
		t.Fatalf("upstream saw %v, want the rewritten query twice (the test's rewrite did not happen)", got)
	}
	// The outcome's snapshot.
	parts := config.By("header:X-User-Id,query:tenant").Parts()
	want := []observe.KeyValue{{Part: parts[0], Value: "alice"}, {Part: parts[1], Value: "acme"}}
	if len(seen.keys) != 3 {
		t.Fatalf("observed %d outcomes, want 3", len(seen.keys))
	}
	for i, kv := range seen.keys {
		if !slices.Equal(kv, want) {
			t.Errorf("request %d: outcome keys %v, want %v", i, kv, want)
		}
	}
	// /top.
	snap := top.Snapshot(t0, "app-1")
	if len(snap) != 1 || len(snap[0].Keys) != 1 {
		t.Fatalf("/top: got %+v, want one limit with one key", snap)
	}
	// Hashed as the access log writes them (both under no secret here).
	if k, want := snap[0].Keys[0], observe.KeyHash("alice")+", "+observe.KeyHash("acme"); k.Key != want || k.Admitted != 2 || k.Limited != 1 {
		t.Errorf("/top: got key %q admitted %d limited %d, want %q 2 1", k.Key, k.Admitted, k.Limited, want)
	}
	// The access log.
	lines := strings.Split(strings.TrimSpace(logBuf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("access log: got %d lines, want 3", len(lines))
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if got, want := rec["key_hash.header:X-User-Id"], observe.KeyHash("alice"); got != want {
			t.Errorf("line %d: header hash %v, want alice's %s", i, got, want)
		}
		if got, want := rec["key_hash.query:tenant"], observe.KeyHash("acme"); got != want {
			t.Errorf("line %d: query hash %v, want acme's %s", i, got, want)
		}
	}
}

// BenchmarkHandlerAccessLog is BenchmarkHandler's admitted-by-header
// with an access log (to io.Discard) beside the metrics and /top: the
// observers of `gateway serve --access-log`.
func BenchmarkHandlerAccessLog(b *testing.B) {
	const rules = `
configs:
  - appId: app-user
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        by: header:X-User-Id
        limit: 1000000000
`
	h := benchHandler(b, rules, func(c *HandlerConfig) {
		c.Observers = append(c.Observers, observe.NewAccessLog(io.Discard, nil))
	})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", "/v1/user/42", nil)
		r.Header.Set("X-User-Id", "user-42")
		app := []string{"app-user"}
		for pb.Next() {
			r.URL.Path = "/v1/user/42"
			r.Header["X-App-Id"] = app
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	})
}
