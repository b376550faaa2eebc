package rls

import (
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// TopBy is the By of the limits Top lists: they count by the values of
// a descriptor's entries.
const TopBy config.By = "descriptor"

// Top counts, in the observe.Top of `gateway serve`'s /top, per domain
// and configured descriptor with more than one counter (a level without
// a value, each value counted apart), the heaviest values of the last one
// to two periods, with how many calls the descriptor's limit admitted and
// denied: who is hitting this limit (docs/rls.md "Top talkers"). App is
// the domain, API the descriptor's path, By TopBy, a key the request's
// entries ("key=value, key=value"), each value hashed as the access log
// writes it unless TopConfig.RawKeys (--top-keys). Its memory is bounded
// by K entries per configured descriptor, and its labels by the config:
// a domain or descriptor the config does not know is not listed. Limit
// overrides carried by requests are listed under the path "(override)".
// It is an Observer, safe for concurrent use.
type Top struct {
	*observe.Top
}

// NewTop returns an empty Top; cfg's zero fields take observe's defaults,
// as `gateway serve` has.
func NewTop(cfg observe.TopConfig) *Top { return &Top{observe.NewTop(cfg)} }

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
			b.WriteString(t.Value(e.GetValue()))
		}
		admitted := c.Response.GetStatuses()[i].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT
		t.Add(c.Start, c.Request.GetDomain(), path, TopBy, b.String(), admitted)
	}
}

var _ Observer = (*Top)(nil)
