package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// A class is one kind of traffic with the statuses it may get. Any other
// status, or no response at all, is unexpected.
type class struct {
	name     string
	what     string
	weight   int
	expected []int
	// build returns the request's path (sent as is), its app ID headers
	// (nil: none) and its client IP (sent in X-Forwarded-For).
	build func(g *gen) (path string, appIDs []string, ip netip.Addr)
}

// The bad requests: every one must get a 400 from the gateway.
var (
	badAppIDs = [][]string{
		{"bad id"},                    // a space
		{"bad/id"},                    // a slash
		{strings.Repeat("a", 129)},    // one byte too long
		{""},                          // present but empty
		{"soak-ok", "soak-ok"},        // sent twice
		{"caf\xc3\xa9"},               // not ASCII
		{strings.Repeat("é", 100)},    // long and not ASCII
		{"app;drop table"},            // punctuation
		{"app-1", "something-else-1"}, // two different
	}
	badPaths = []string{
		"/%2e%2e/%2f",        // encoded dot-dot and slash
		"/v1/user%2F42",      // encoded slash
		"/v1/%zz",            // malformed escape
		"/v1/a%00b",          // NUL
		"/v1/a%5cb",          // encoded backslash
		`/v1/a\b`,            // raw backslash
		"/v1/%ff%fe",         // invalid UTF-8
		"/v1/a%0ab",          // a control character
		"/v1/user/%2e%2e%2f", // dot-dot and an encoded slash
	}
)

var classes = []*class{
	{
		name: "allowed", what: "soak-ok, always under its limits", weight: 40,
		expected: []int{http.StatusOK},
		build: func(g *gen) (string, []string, netip.Addr) {
			p := "/v1/user/" + strconv.Itoa(g.rng.IntN(1000))
			if g.rng.IntN(2) == 0 {
				p = "/v1/order/" + strconv.Itoa(g.rng.IntN(1000)) // a rule in variant B only; the app total otherwise
			}
			return p, []string{"soak-ok"}, g.freshIP()
		},
	},
	{
		name: "limited", what: "soak-limited, driven over its 20-30 a second", weight: 20,
		expected: []int{http.StatusOK, http.StatusTooManyRequests},
		build: func(g *gen) (string, []string, netip.Addr) {
			return "/v1/user/" + strconv.Itoa(g.rng.IntN(1000)), []string{"soak-limited"}, g.freshIP()
		},
	},
	{
		name: "invalid app ID", what: "bad app ID headers", weight: 8,
		expected: []int{http.StatusBadRequest},
		build: func(g *gen) (string, []string, netip.Addr) {
			return "/v1/user/1", badAppIDs[g.rng.IntN(len(badAppIDs))], g.freshIP()
		},
	},
	{
		name: "invalid path", what: "paths the gateway must refuse", weight: 7,
		expected: []int{http.StatusBadRequest},
		build: func(g *gen) (string, []string, netip.Addr) {
			var app []string
			if g.rng.IntN(2) == 0 {
				app = []string{"soak-ok"}
			}
			return badPaths[g.rng.IntN(len(badPaths))], app, g.freshIP()
		},
	},
	{
		name: "unknown", what: "no or an unconfigured app ID; many client IPs, a few of them hot", weight: 25,
		expected: []int{http.StatusOK, http.StatusTooManyRequests},
		build: func(g *gen) (string, []string, netip.Addr) {
			p := "/v1/item/" + strconv.Itoa(g.rng.IntN(1000))
			if g.rng.IntN(4) == 0 {
				p = "/v1/search?q=" + strconv.Itoa(g.rng.IntN(1000)) // its own rule in variant B
			}
			var app []string
			if g.rng.IntN(2) == 0 {
				app = []string{"guest-" + strconv.Itoa(g.rng.IntN(1_000_000))}
			}
			ip := g.freshIP()
			if g.rng.IntN(5) == 0 {
				ip = hotIPs[g.rng.IntN(len(hotIPs))]
			}
			return p, app, ip
		},
	},
}

// hotIPs send a fifth of the unknown callers' requests: enough for each to
// go over its per-IP limit.
var hotIPs = func() []netip.Addr {
	ips := make([]netip.Addr, 16)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
	}
	return ips
}()

// nextIP numbers the fresh client IPs: 100.64.0.0/10 holds four million,
// more than a soak sends.
var nextIP atomic.Uint32

// gen makes one worker's requests.
type gen struct {
	rng *rand.Rand
}

func (g *gen) freshIP() netip.Addr {
	v := uint32(100<<24|64<<16) + nextIP.Add(1)&(1<<22-1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// pick returns a class at random by weight.
func (g *gen) pick() *class {
	total := 0
	for _, c := range classes {
		total += c.weight
	}
	n := g.rng.IntN(total)
	for _, c := range classes {
		if n < c.weight {
			return c
		}
		n -= c.weight
	}
	return classes[len(classes)-1]
}

// tally counts responses by class and status ("error" for none).
type tally struct {
	mu         sync.Mutex
	counts     map[string]map[string]int
	unexpected map[string]int
	examples   []string
	total      atomic.Int64
}

func newTally() *tally {
	return &tally{counts: map[string]map[string]int{}, unexpected: map[string]int{}}
}

// add records one response of c: its status, or the error.
func (t *tally) add(c *class, path string, app []string, code int, err error, body string) {
	status := strconv.Itoa(code)
	ok := err == nil && slices.Contains(c.expected, code)
	if err != nil {
		status = "error"
	}
	t.total.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.counts[c.name]
	if m == nil {
		m = map[string]int{}
		t.counts[c.name] = m
	}
	m[status]++
	if ok {
		return
	}
	t.unexpected[c.name]++
	if len(t.examples) < 10 {
		e := fmt.Sprintf("%s: GET %q app %q: ", c.name, path, app)
		if err != nil {
			e += err.Error()
		} else {
			e += fmt.Sprintf("%d %.200s", code, body)
		}
		t.examples = append(t.examples, e)
	}
}

// send sends one request of class c to the proxy at host and records it.
func send(client *http.Client, host string, g *gen, c *class, t *tally) {
	path, app, ip := c.build(g)
	req, err := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	if err != nil {
		panic(err)
	}
	// Opaque sends the path exactly as written: the bad paths must reach
	// the gateway unchanged.
	req.URL.Path, req.URL.Opaque = "", path
	if p, q, ok := strings.Cut(path, "?"); ok {
		req.URL.Opaque, req.URL.RawQuery = p, q
	}
	if app != nil {
		req.Header["X-App-Id"] = app
	}
	req.Header["X-Forwarded-For"] = []string{ip.String()}
	resp, err := client.Do(req)
	if err != nil {
		t.add(c, path, app, 0, err, "")
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	t.add(c, path, app, resp.StatusCode, err, string(body))
}
