package observe

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
)

// t0 is the tests' fixed instant.
var t0 = gwtest.T0

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
	top := NewTop(TopConfig{RawKeys: true})
	o := &Outcome{Start: t0}
	o.AddLimit(LimitOutcome{App: "app-1", API: "/v1/profile", By: "header:X-User-Id", Allowed: true})
	l := &o.Limits()[0]
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
			l.Key = "heavy-" + strconv.Itoa(i/5%heavy)
			l.Allowed = false
		} else {
			l.Key = "flood-" + strconv.Itoa(i)
			l.Allowed = true
		}
		top.ObserveRequest(o)
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
		o := &Outcome{Start: t0}
		o.AddLimit(LimitOutcome{App: "app-1", API: "/", By: by, Allowed: true})
		top.ObserveRequest(o)
	}
	if n := len(top.Snapshot(t0, "")); n != 0 {
		t.Errorf("got %d limits, want 0", n)
	}
}

// TestTopHashesKeys checks that /top shows the header, query and claim
// values of keyed limits hashed as the access log writes them, under the
// same secret, so that an API key or a user ID never shows in clear,
// while client address groups stay readable; RawKeys shows the values.
func TestTopHashesKeys(t *testing.T) {
	t.Parallel()
	h := NewKeyHasher([]byte(strings.Repeat("s", MinKeyHashSecret)))
	apiKey := config.KeyPart{Kind: config.KeyHeader, Name: "X-Api-Key"}
	tenant := config.KeyPart{Kind: config.KeyQuery, Name: "tenant"}
	for _, tc := range []struct {
		name    string
		by      config.By
		key     string
		missing bool
		values  []KeyValue
		raw     bool
		want    string
	}{
		{name: "api key", by: "header:X-Api-Key", key: "sk-live-SECRET",
			values: []KeyValue{{Part: apiKey, Value: "sk-live-SECRET"}}, want: h.Hash("sk-live-SECRET")},
		{name: "api key raw", by: "header:X-Api-Key", key: "sk-live-SECRET", raw: true,
			values: []KeyValue{{Part: apiKey, Value: "sk-live-SECRET"}}, want: "sk-live-SECRET"},
		{name: "address and values", by: "ip,header:X-Api-Key,query:tenant", key: "203.0.113.0/24, sk, 1, acme",
			values: []KeyValue{{Part: apiKey, Value: "sk, 1"}, {Part: tenant, Value: "acme"}},
			want:   "203.0.113.0/24, " + h.Hash("sk, 1") + ", " + h.Hash("acme")},
		{name: "values and address", by: "header:X-Api-Key,ip", key: "sk, 203.0.113.0/24",
			values: []KeyValue{{Part: apiKey, Value: "sk"}},
			want:   h.Hash("sk") + ", 203.0.113.0/24"},
		{name: "missing, shared", by: "header:X-Api-Key,query:tenant", key: ", acme",
			values: []KeyValue{{Part: apiKey, Value: ""}, {Part: tenant, Value: "acme"}},
			want:   ", " + h.Hash("acme")},
		{name: "missing, by address", by: "header:X-Api-Key", key: "203.0.113.0/24", missing: true,
			want: "203.0.113.0/24"},
		{name: "by ip", by: "ip", key: "203.0.113.0/24", want: "203.0.113.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := NewTop(TopConfig{Hasher: h, RawKeys: tc.raw})
			o := &Outcome{Start: t0}
			for _, kv := range tc.values {
				o.AddKey(kv)
			}
			o.AddLimit(LimitOutcome{App: "*", API: "/", By: tc.by, Key: tc.key, Missing: tc.missing, Allowed: true})
			top.ObserveRequest(o)
			snap := top.Snapshot(t0, "")
			if len(snap) != 1 || len(snap[0].Keys) != 1 {
				t.Fatalf("got %+v, want one limit with one key", snap)
			}
			if got := snap[0].Keys[0]; got.Key != tc.want || got.Missing != tc.missing {
				t.Errorf("key: got %q (missing %v), want %q (missing %v)", got.Key, got.Missing, tc.want, tc.missing)
			}
			if !tc.raw && strings.Contains(snap[0].Keys[0].Key, "sk") {
				t.Errorf("key %q shows the API key", snap[0].Keys[0].Key)
			}
		})
	}
}
