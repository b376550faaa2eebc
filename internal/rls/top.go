package rls

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/topk"
)

// TopBy is the By of the limits Top lists: they count by the values of
// a descriptor's entries.
const TopBy config.By = "descriptor"

// Top keeps, per domain and configured descriptor with more than one
// counter (a level without a value, each value counted apart), the
// heaviest values of the last one to two periods, with how many calls
// the descriptor's limit admitted and denied: who is hitting this limit
// (docs/rls.md "Top talkers"). Its memory is bounded by K entries per
// configured descriptor, and its labels by the config: a domain or
// descriptor the config does not know is not listed. Limit overrides
// carried by requests are listed under the path "(override)". It is an
// Observer, safe for concurrent use.
type Top struct {
	k      int
	period time.Duration
	mu     sync.RWMutex
	limits map[topLabels]*topLimit
}

type topLabels struct{ domain, path string }

// topLimit is the window of one descriptor, under its own lock so that
// descriptors do not contend.
type topLimit struct {
	mu sync.Mutex
	w  *topk.Window
}

// NewTop returns an empty Top; cfg's zero fields take
// observe.DefaultTopK and observe.DefaultTopPeriod, as `gateway serve` has.
func NewTop(cfg observe.TopConfig) *Top {
	return &Top{
		k:      cmp.Or(cfg.K, observe.DefaultTopK),
		period: cmp.Or(cfg.Period, observe.DefaultTopPeriod),
		limits: map[topLabels]*topLimit{},
	}
}

// ObserveCall counts the values of the call's descriptors that were
// decided by a limit with more than one counter. It implements Observer.
func (t *Top) ObserveCall(c *Call) {
	if c.Err != nil {
		return
	}
	descs := c.Request.GetDescriptors()
	for i := range c.ds {
		d := &c.ds[i]
		if d.req < 0 || (d.desc != nil && d.desc.Bounded) {
			continue // not decided, or one counter: nothing to rank
		}
		path := overrideLabel
		if d.desc != nil {
			path = d.desc.Path
		}
		var b strings.Builder
		for j, e := range descs[i].GetEntries() {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.GetKey())
			b.WriteByte('=')
			b.WriteString(e.GetValue())
		}
		admitted := c.Response.GetStatuses()[i].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT
		tl := t.limit(c.Request.GetDomain(), path)
		tl.mu.Lock()
		tl.w.Add(c.Start, b.String(), admitted)
		tl.mu.Unlock()
	}
}

func (t *Top) limit(domain, path string) *topLimit {
	k := topLabels{domain, path}
	t.mu.RLock()
	tl := t.limits[k]
	t.mu.RUnlock()
	if tl != nil {
		return tl
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl = t.limits[k]; tl == nil {
		tl = &topLimit{w: topk.NewWindow(t.k, t.period)}
		t.limits[k] = tl
	}
	return tl
}

// Snapshot returns the heaviest values of every descriptor counted in
// the window at now, or only of domain if it is not "", ordered by
// domain and path, in the shape of `gateway serve`'s GET /top: App is
// the domain, API the descriptor's path, a Key the request's entries
// ("key=value, key=value").
func (t *Top) Snapshot(now time.Time, domain string) []observe.TopLimit {
	t.mu.RLock()
	type named struct {
		k  topLabels
		tl *topLimit
	}
	var lims []named
	for k, tl := range t.limits {
		if domain == "" || k.domain == domain {
			lims = append(lims, named{k, tl})
		}
	}
	t.mu.RUnlock()
	out := make([]observe.TopLimit, 0, len(lims))
	for _, l := range lims {
		l.tl.mu.Lock()
		keys, n, from := l.tl.w.Top(now)
		l.tl.mu.Unlock()
		if n == 0 {
			// Forget descriptors nobody hits, removed ones among them.
			t.mu.Lock()
			if t.limits[l.k] == l.tl {
				delete(t.limits, l.k)
			}
			t.mu.Unlock()
			continue
		}
		shown := make([]observe.TopKey, len(keys))
		for i, k := range keys {
			shown[i] = observe.TopKey{Key: k.Key, Count: k.Count, Error: k.Error, Admitted: k.Admitted, Limited: k.Limited}
		}
		out = append(out, observe.TopLimit{App: l.k.domain, API: l.k.path, By: TopBy, Requests: n, From: from.UTC(), Keys: shown})
	}
	slices.SortFunc(out, func(a, b observe.TopLimit) int {
		return cmp.Or(strings.Compare(a.App, b.App), strings.Compare(a.API, b.API))
	})
	return out
}

// K returns how many values are kept per descriptor.
func (t *Top) K() int { return t.k }

var _ Observer = (*Top)(nil)
