package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// floodRules has a configured app with a small limit (app-1: 50 a minute
// on /v1/user under a total of 1000), a configured app that first calls
// only once the store is full (app-late), and a per-IP "*" section with
// two rules, so two overflow keys.
const floodRules = `
configs:
  - appId: app-1
    limit: 1000
    unit: 1m
    limits:
      - api: /v1/user
        limit: 50
        unit: 1m
  - appId: app-late
    limits:
      - api: /v1/user
        limit: 7
        unit: 1m
  - appId: "*"
    by: ip
    limits:
      - api: /
        limit: 20
        unit: 1m
      - api: /v1/search
        limit: 5
        unit: 1m
`

// The flood's shape.
const (
	floodMaxKeys = 5_000
	floodApp1    = 50 // app-1's /v1/user limit
	floodLate    = 7  // app-late's /v1/user limit
	// floodLateKeys is the number of configured apps' keys created once
	// the store is full: app-late's rule.
	floodLateKeys = 1
	// floodClockStep is how far the clock moves on each reading: the
	// handler reads it twice per request, so the whole flood spans 5s of
	// the 1m windows.
	floodClockStep = 25 * time.Microsecond
)

// floodOverflowLimit is the limit of each per-IP rule, by the key its
// unknown callers share once the store is full.
var floodOverflowLimit = map[string]int{"*|/|overflow": 20, "*|/v1/search|overflow": 5}

// floodConfiguredKeys are the keys of the configured apps: app-1's total
// and rule, created by the flood's first request, and app-late's rule,
// created after the store is full.
var floodConfiguredKeys = []string{"app-1|", "app-1|/v1/user", "app-late|/v1/user"}

// floodClock is an injected clock that moves floodClockStep on every
// reading, so that the flood's instants are fixed whatever the machine.
type floodClock struct{ ticks atomic.Int64 }

func (c *floodClock) now() time.Time {
	return t0.Add(time.Duration(c.ticks.Add(1)) * floodClockStep)
}

type floodClass int

const (
	floodApp1Class floodClass = iota
	floodLateClass
	floodUnknownClass
	numFloodClasses
)

var floodClassNames = [numFloodClasses]string{"app-1", "app-late", "unknown"}

// floodClassOf returns the class of request i of a flood of n. Every
// tenth request is app-1's; from the middle of the flood on (the store is
// full long before), every tenth is app-late's; the others are unknown
// callers.
func floodClassOf(i, n int) floodClass {
	switch {
	case i%10 == 0:
		return floodApp1Class
	case i%10 == 5 && i >= n/2:
		return floodLateClass
	}
	return floodUnknownClass
}

// floodRequest returns request i of a flood of n and its class. Each request
// comes from its own client IP; an unknown caller has no app ID (a third
// of them) or one of its own that no rule configures, and asks for
// /v1/search (half of them) or another path (the "/" rule).
func floodRequest(i, n int) (*http.Request, floodClass) {
	class := floodClassOf(i, n)
	target, app := "/v1/user/"+strconv.Itoa(i), ""
	switch class {
	case floodApp1Class:
		app = "app-1"
	case floodLateClass:
		app = "app-late"
	default:
		target = "/v1/item/" + strconv.Itoa(i)
		if i%2 == 0 {
			target = "/v1/search?q=" + strconv.Itoa(i)
		}
		if i%3 != 0 {
			app = "caller-" + strconv.Itoa(i)
		}
	}
	// http.NewRequest rather than httptest.NewRequest: it does not parse
	// a request line, and the flood builds 100,000 requests.
	r, err := http.NewRequest("GET", "http://gateway.test"+target, nil)
	if err != nil {
		panic(err)
	}
	r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 40000).String()
	if app != "" {
		r.Header["X-App-Id"] = []string{app}
	}
	return r, class
}

// floodOverflowKey is the overflow key an unknown caller's request to
// target is counted against once the store is full.
func floodOverflowKey(target string) string {
	if strings.HasPrefix(target, "/v1/search") {
		return "*|/v1/search|overflow"
	}
	return "*|/|overflow"
}

// TestFloodOfDistinctCallers floods the real handler and memory store with
// requests nearly all from distinct client IPs with distinct unconfigured
// app IDs, interleaved with configured apps' requests: 100,000 from one
// caller, then 40,000 from eight concurrent callers. The
// memory store's keys stay within
//
//	MaxKeys + P + C + (W − 1)
//
// where P is the number of limits in "by: ip" sections (one overflow key
// each), C the number of configured apps' keys first used once the store
// is full (they have no overflow key and are created anyway) and W the
// number of concurrent callers (the cap is checked before the shard lock:
// each caller that saw the store below it may add one key). Here P = 2 and
// C = 1: 5,003 keys for one caller, 5,010 for eight. The configured apps
// are admitted exactly their limits, and unknown callers beyond the cap
// are admitted exactly the overflow keys' limits between them.
func TestFloodOfDistinctCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the flood sends 140,000 requests")
	}
	t.Parallel()
	tests := []struct {
		name     string
		requests int
		workers  int
	}{
		{name: "sequential", requests: 100_000, workers: 1},
		// Fewer requests: the race detector makes them dear, and 40,000
		// fill the store eight times over.
		{name: "concurrent", requests: 40_000, workers: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runFlood(t, tt.requests, tt.workers)
		})
	}
}

func runFlood(t *testing.T, n, workers int) {
	parsed, err := config.Parse("flood.yaml", []byte(floodRules))
	if err != nil {
		t.Fatalf("parsing rules: %v", err)
	}
	rs, err := ruleset.Compile(parsed, t0)
	if err != nil {
		t.Fatalf("compiling rules: %v", err)
	}
	store, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: floodMaxKeys})
	if err != nil {
		t.Fatal(err)
	}
	var forwarded atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		forwarded.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	log := slog.New(slog.DiscardHandler)
	rp, err := NewUpstream(UpstreamConfig{URL: u, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := observe.NewMetrics(observe.MetricsConfig{Registry: reg, Keys: store.Len})
	clk := &floodClock{}
	h, err := NewHandler(HandlerConfig{
		Rules: rs, Store: store, Upstream: rp, Now: clk.now, Logger: log,
		Observers: []observe.Observer{metrics},
	})
	if err != nil {
		t.Fatal(err)
	}

	bound := floodMaxKeys + len(floodOverflowLimit) + floodLateKeys + workers - 1
	var (
		mu        sync.Mutex
		counts    [numFloodClasses]map[int]int
		maxLen    int
		overflow  = map[string]int{} // sequential only: requests counted per overflow key
		failures  []string
		sample429 string
	)
	for c := range counts {
		counts[c] = map[int]int{}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	// send sends request i and checks what it can on its own; the
	// counts go to the caller's tallies.
	send := func(i int, tally *[numFloodClasses]map[int]int, seen *int) {
		r, class := floodRequest(i, n)
		before := store.Len()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		after := store.Len()
		tally[class][rec.Code]++
		*seen = max(*seen, after)
		if after > bound {
			fail("request %d (%s): %d keys, more than the bound %d", i, floodClassNames[class], after, bound)
		}
		if class == floodUnknownClass && rec.Code == http.StatusTooManyRequests && i%2 == 1 {
			mu.Lock()
			if sample429 == "" {
				sample429 = rec.Body.String()
			}
			mu.Unlock()
		}
		if workers == 1 && class == floodUnknownClass {
			// One caller: each unknown caller's fate is exact. Below the
			// cap it gets a key of its own (a fresh one: 200); at the cap
			// it is counted against its rule's overflow key, which admits
			// that rule's limit and no more.
			want := http.StatusOK
			if before < floodMaxKeys {
				if after != before+1 {
					fail("request %d below the cap: keys went from %d to %d, want %d", i, before, after, before+1)
				}
			} else {
				k := floodOverflowKey(r.URL.RequestURI())
				overflow[k]++
				if overflow[k] > floodOverflowLimit[k] {
					want = http.StatusTooManyRequests
				}
			}
			if rec.Code != want {
				fail("request %d (unknown caller, %d keys before): status %d, want %d", i, before, rec.Code, want)
			}
		}
	}
	merge := func(tally *[numFloodClasses]map[int]int, seen int) {
		mu.Lock()
		defer mu.Unlock()
		for c := range tally {
			for code, n := range tally[c] {
				counts[c][code] += n
			}
		}
		maxLen = max(maxLen, seen)
	}
	newTally := func() *[numFloodClasses]map[int]int {
		var tally [numFloodClasses]map[int]int
		for c := range tally {
			tally[c] = map[int]int{}
		}
		return &tally
	}
	// Request 0, app-1's first, creates its keys before the flood fills
	// the store, whatever the workers' schedule.
	first, firstSeen := newTally(), 0
	send(0, first, &firstSeen)
	merge(first, firstSeen)
	// The workers take requests in order: when one takes request i, all
	// but at most workers-1 of the requests before it are done, so app-late
	// calls only once the store is full.
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	next.Store(1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tally, seen := newTally(), 0
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				send(i, tally, &seen)
			}
			merge(tally, seen)
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}

	// Which keys the store holds: Forget with a keep that keeps everything
	// lists them without changing anything.
	var (
		configured, overflowKeys []string
		ipKeys                   int
	)
	store.Forget(func(key string) bool {
		switch {
		case strings.HasSuffix(key, "|overflow"):
			overflowKeys = append(overflowKeys, key)
		case strings.HasPrefix(key, "*|"):
			ipKeys++
		default:
			configured = append(configured, key)
		}
		return true
	})
	sort.Strings(configured)
	sort.Strings(overflowKeys)
	if got, want := strings.Join(configured, " "), strings.Join(floodConfiguredKeys, " "); got != want {
		t.Errorf("configured apps' keys: got %q, want %q", got, want)
	}
	if got, want := strings.Join(overflowKeys, " "), "*|/v1/search|overflow *|/|overflow"; got != want {
		t.Errorf("overflow keys: got %q, want %q", got, want)
	}
	// app-1's keys exist before the store fills, so per-IP keys take the
	// rest of the cap; concurrent callers may each add one more.
	minIP := floodMaxKeys - 2
	if ipKeys < minIP || ipKeys > minIP+workers-1 {
		t.Errorf("per-IP keys: got %d, want %d..%d", ipKeys, minIP, minIP+workers-1)
	}
	total := store.Len()
	if got, want := total, len(configured)+len(overflowKeys)+ipKeys; got != want {
		t.Errorf("Len: got %d, want %d (the keys listed)", got, want)
	}
	if total > bound || maxLen > bound {
		t.Errorf("keys: %d at the end, at most %d during the flood; want at most %d", total, maxLen, bound)
	}
	if workers == 1 {
		if got, want := total, floodMaxKeys+len(floodOverflowLimit)+floodLateKeys; got != want {
			t.Errorf("keys at the end: got %d, want exactly %d", got, want)
		}
	}

	// The configured apps were admitted exactly their limits: their
	// counters were neither evicted nor shared with the flood.
	checkCounts := func(class floodClass, sent, admitted int) {
		t.Helper()
		got := counts[class]
		if got[http.StatusOK] != admitted || got[http.StatusTooManyRequests] != sent-admitted || len(got) > 2 {
			t.Errorf("%s: statuses %v of %d requests, want %d × 200 and %d × 429",
				floodClassNames[class], got, sent, admitted, sent-admitted)
		}
	}
	var sent [numFloodClasses]int
	for i := range n {
		sent[floodClassOf(i, n)]++
	}
	checkCounts(floodApp1Class, sent[floodApp1Class], floodApp1)
	checkCounts(floodLateClass, sent[floodLateClass], floodLate)
	// Unknown callers: each per-IP key was created by one caller's one
	// request, which it admitted; every other unknown caller was counted
	// against an overflow key, which admitted its limit in all.
	overflowAdmitted := 0
	for _, lim := range floodOverflowLimit {
		overflowAdmitted += lim
	}
	checkCounts(floodUnknownClass, sent[floodUnknownClass], ipKeys+overflowAdmitted)
	var body struct {
		Error, App, API string
	}
	if err := json.Unmarshal([]byte(sample429), &body); err != nil || body.Error != "rate_limited" || body.App != "*" || body.API != "/" {
		t.Errorf("an overflowed caller's 429: got %q, want rate_limited for app * api /", sample429)
	}
	if got, want := forwarded.Load(), int64(floodApp1+floodLate+ipKeys+overflowAdmitted); got != want {
		t.Errorf("forwarded: got %d, want %d (every 200)", got, want)
	}

	// No caller-chosen app ID became a label, and the keys gauge is the
	// store's.
	apps, keysSeen := map[string]bool{}, false
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gateway_limiter_keys" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != float64(total) {
				t.Errorf("gateway_limiter_keys: got %v, want %d", got, total)
			}
			keysSeen = true
		}
		if mf.GetName() != "gateway_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "app" {
					apps[l.GetValue()] = true
				}
			}
		}
	}
	if !keysSeen {
		t.Error("gateway_limiter_keys: not gathered")
	}
	if len(apps) != 3 || !apps["app-1"] || !apps["app-late"] || !apps["*"] {
		t.Errorf("app labels of gateway_requests_total: got %v, want app-1, app-late and *", apps)
	}

	// One window later app-1 gets its whole limit again, from its own
	// counter: the flood cost it nothing.
	later := clk.now().Add(time.Minute + 6*time.Second)
	clk.ticks.Store(int64(later.Sub(t0) / floodClockStep))
	admitted := 0
	for i := range floodApp1 + 5 {
		r := httptest.NewRequest("GET", fmt.Sprintf("/v1/user/%d", i), nil)
		r.Header.Set("X-App-Id", "app-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			admitted++
		}
	}
	if admitted != floodApp1 {
		t.Errorf("app-1 one window after the flood: %d of %d admitted, want %d", admitted, floodApp1+5, floodApp1)
	}
}
