package observe

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/topk"
)

// Defaults of TopConfig.
const (
	DefaultTopK      = 32
	DefaultTopPeriod = time.Minute
)

// TopConfig configures NewTop.
type TopConfig struct {
	// K is how many keys are kept per limit. Default DefaultTopK.
	K int
	// Period is how often the window rotates: it covers the last one to
	// two periods. Default DefaultTopPeriod.
	Period time.Duration
	// Hasher hashes the header, query and claim values in the keys, as
	// the access log does, so that /top shows no API key, user ID or
	// token in clear; client address groups are shown as they are, as
	// the access log's client_ip. nil hashes with no secret (KeyHash).
	Hasher *KeyHasher
	// RawKeys shows the values as they are instead (--top-keys).
	RawKeys bool
}

// Top keeps, per app and limit with more than one counter (by ip, a
// header, a query parameter or a combination), the heaviest counter keys
// of the last one to two periods, with what was admitted and limited: it
// answers "who is hitting this limit" (docs/operations.md, "Admin port"). Its memory is
// bounded by K entries per limit whatever callers send. It is an Observer,
// safe for concurrent use.
type Top struct {
	k      int
	period time.Duration
	hasher *KeyHasher
	raw    bool
	mu     sync.RWMutex
	limits map[ruleLabels]*topLimit
}

// topLimit is the window of one limit, guarded by its own lock so that
// limits do not contend.
type topLimit struct {
	by config.By
	mu sync.Mutex
	w  *topk.Window
	// routes are the routes of the rule file that the limit's requests
	// took (bounded by the rule file), nil when none took one.
	routes map[string]struct{}
}

// NewTop returns an empty Top.
func NewTop(cfg TopConfig) *Top {
	return &Top{
		k:      cmp.Or(cfg.K, DefaultTopK),
		period: cmp.Or(cfg.Period, DefaultTopPeriod),
		hasher: cfg.Hasher,
		raw:    cfg.RawKeys,
		limits: map[ruleLabels]*topLimit{},
	}
}

// ObserveRequest counts the request's keys. It implements Observer. A
// request whose limits each have one counter costs a loop over them.
func (t *Top) ObserveRequest(o *Outcome) {
	for _, l := range o.Limits() {
		if l.By == "" || l.By == config.ByApp || l.By == config.ByGlobal {
			continue // one counter: nothing to rank
		}
		tl := t.limit(l.App, l.API, l.By)
		key := l.Key
		if !t.raw && !l.Missing && l.By.Attributes() {
			key = t.hashKey(&l, o)
		}
		key = topKey(key, l.Missing)
		tl.mu.Lock()
		tl.w.Add(o.Start, key, l.Allowed)
		if o.Route != "" {
			if _, ok := tl.routes[o.Route]; !ok {
				if tl.routes == nil {
					tl.routes = map[string]struct{}{}
				}
				tl.routes[o.Route] = struct{}{}
			}
		}
		tl.mu.Unlock()
	}
}

// Add counts one request of a limit that is not the request path's: app
// and api label it, by says what its keys count by, key is the key as
// /top shows it (its values through Value), admitted whether the limit
// admitted the request. `gateway rls` counts its descriptors this way.
func (t *Top) Add(now time.Time, app, api string, by config.By, key string, admitted bool) {
	tl := t.limit(app, api, by)
	key = topKey(key, false)
	tl.mu.Lock()
	tl.w.Add(now, key, admitted)
	tl.mu.Unlock()
}

// Value returns v as /top shows a value a caller sent: hashed as the
// access log writes it (TopConfig.Hasher), or as it is with
// TopConfig.RawKeys.
func (t *Top) Value(v string) string {
	if t.raw {
		return v
	}
	return t.hasher.Hash(v)
}

// hashKey returns l.Key with its header, query and claim values replaced
// by their hashes, each as the access log writes it, and the client
// address group of a combination left as it is. An empty value (missing
// under missing: share) stays empty.
func (t *Top) hashKey(l *LimitOutcome, o *Outcome) string {
	parts := l.By.Parts()
	if len(parts) == 1 {
		if l.Key == "" {
			return ""
		}
		return t.hasher.Hash(l.Key)
	}
	// l.Key joins the values with ", ", the address group among them;
	// the other values are in o, so the group is what they leave.
	vals := make([]string, len(parts))
	ip, ips, start, rest := -1, 0, 0, len(l.Key)
	for i, p := range parts {
		if p.Kind == config.KeyIP {
			ip, ips = i, ips+1
			continue
		}
		kv, _ := o.Key(p)
		vals[i] = kv.Value
		rest -= len(kv.Value)
		if ip < 0 {
			start += len(kv.Value) + len(", ")
		}
	}
	rest -= len(", ") * (len(parts) - 1)
	if ips > 1 || (ip >= 0 && (rest < 0 || start+rest > len(l.Key))) {
		return t.hasher.Hash(l.Key) // not as shownKey builds it: hide it whole
	}
	if ip >= 0 {
		vals[ip] = l.Key[start : start+rest]
	}
	for i, p := range parts {
		if p.Kind != config.KeyIP && vals[i] != "" {
			vals[i] = t.hasher.Hash(vals[i])
		}
	}
	return strings.Join(vals, ", ")
}

// topKey returns what the window keeps for a key: the key as it is, but
// with a NUL before the address group of a request missing its value
// (missing: ip), and before a key that begins with a NUL (a query value
// or a claim can), so that a value never reads as a missing one.
func topKey(key string, missing bool) string {
	if missing || strings.HasPrefix(key, "\x00") {
		return "\x00" + key
	}
	return key
}

// fromTopKey returns the key and whether it stands for a missing value,
// from what topKey returned.
func fromTopKey(k string) (string, bool) {
	if rest, ok := strings.CutPrefix(k, "\x00"); ok {
		if strings.HasPrefix(rest, "\x00") {
			return rest, false
		}
		return rest, true
	}
	return k, false
}

// limit returns the window of app's limit api, created on first use.
func (t *Top) limit(app, api string, by config.By) *topLimit {
	k := ruleLabels{app, api}
	t.mu.RLock()
	tl := t.limits[k]
	t.mu.RUnlock()
	if tl != nil && tl.by == by {
		return tl
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl = t.limits[k]; tl == nil || tl.by != by {
		// A reload changed what the limit is keyed by: its old keys
		// mean nothing now.
		tl = &topLimit{by: by, w: topk.NewWindow(t.k, t.period)}
		t.limits[k] = tl
	}
	return tl
}

// TopLimit is one limit's heaviest keys.
type TopLimit struct {
	App string `json:"app"`
	// API is the rule's pattern; "" for the app's total.
	API string    `json:"api"`
	By  config.By `json:"by"`
	// Requests is how many requests the window counted for the limit.
	Requests int64 `json:"requests"`
	// From is when the window began.
	From time.Time `json:"from"`
	Keys []TopKey  `json:"keys"`
	// Routes are the routes of the rule file that the limit's requests
	// took since it was first counted, sorted; empty when they went to
	// --upstream.
	Routes []string `json:"routes,omitempty"`
}

// TopKey is one of a limit's heaviest keys: a topk.Key, and whether it
// stands for a missing value.
type TopKey struct {
	Key string `json:"key"`
	// Count is an upper bound of the key's requests; Count-Error is a
	// lower bound.
	Count int64 `json:"count"`
	Error int64 `json:"error"`
	// Admitted and Limited are the requests counted while the key was
	// listed: lower bounds, whose sum is Count-Error.
	Admitted int64 `json:"admitted"`
	Limited  int64 `json:"limited"`
	// Missing reports that the requests lacked the value the limit counts
	// by and were counted per client address (missing: ip): Key is their
	// address group, not a value a client sent.
	Missing bool `json:"missing,omitempty"`
}

// Snapshot returns the heaviest keys of every limit counted in the
// window at now, or only of app if it is not "", ordered by app and
// rule.
func (t *Top) Snapshot(now time.Time, app string) []TopLimit {
	t.mu.RLock()
	type named struct {
		k  ruleLabels
		tl *topLimit
	}
	var lims []named
	for k, tl := range t.limits {
		if app == "" || k.app == app {
			lims = append(lims, named{k, tl})
		}
	}
	t.mu.RUnlock()
	out := make([]TopLimit, 0, len(lims))
	for _, l := range lims {
		l.tl.mu.Lock()
		keys, n, from := l.tl.w.Top(now)
		routes := slices.Sorted(maps.Keys(l.tl.routes))
		l.tl.mu.Unlock()
		if n == 0 {
			// Forget limits nobody hits, removed rules among them.
			t.mu.Lock()
			if t.limits[l.k] == l.tl {
				delete(t.limits, l.k)
			}
			t.mu.Unlock()
			continue
		}
		shown := make([]TopKey, len(keys))
		for i, k := range keys {
			shown[i] = TopKey{Count: k.Count, Error: k.Error, Admitted: k.Admitted, Limited: k.Limited}
			shown[i].Key, shown[i].Missing = fromTopKey(k.Key)
		}
		out = append(out, TopLimit{App: l.k.app, API: l.k.api, By: l.tl.by, Requests: n, From: from.UTC(), Keys: shown, Routes: routes})
	}
	slices.SortFunc(out, func(a, b TopLimit) int {
		return cmp.Or(strings.Compare(a.App, b.App), strings.Compare(a.API, b.API))
	})
	return out
}

// K returns how many keys are kept per limit.
func (t *Top) K() int { return t.k }

var _ Observer = (*Top)(nil)
