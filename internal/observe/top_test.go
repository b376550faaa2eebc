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
	top := NewTop(TopConfig{})
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
