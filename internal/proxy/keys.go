package proxy

import (
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// readKeys records in sc's outcome the values of cl's header, query,
// claim and body parts that it does not hold yet. A request's values are
// read from it once, here: its counter keys (ruleset.Limit.AttrKey), the
// keys it is listed under (shownKey, /top) and the access log all take
// them from the outcome, so that they cannot differ. The body is read
// once for all its fields (bodykeys.go).
func readKeys(r *http.Request, cl *ruleset.Limit, sc *scratch) {
	o := &sc.o
	for _, p := range cl.Parts {
		if p.Kind == config.KeyIP {
			continue
		}
		if _, ok := o.Key(p); !ok {
			var v, bad string
			if p.Kind == config.KeyBody {
				if !sc.body.read {
					sc.body.load(r, sc.bodyLimits())
				}
				v = sc.body.value(p.Name)
			} else {
				v, bad = ruleset.AttrValue(r.Header, r.URL.RawQuery, p, o.ClaimValue)
			}
			o.AddKey(observe.KeyValue{Part: p, Value: v, Bad: bad})
		}
	}
}

// bodyLimits returns the limits of sc that may read the body: the rate
// and the concurrency limits that apply.
func (sc *scratch) bodyLimits() []*ruleset.Limit {
	return append(sc.lims[:sc.n:sc.n], sc.conc[:sc.nc]...)
}

// shownKey returns the LimitOutcome.Key of limit cl (of kind
// ruleset.KeyAttrs), whose key AttrKey built from the values in o, and
// whether it is the client address group of a request missing a value
// under missing: ip (LimitOutcome.Missing). A single value is returned as
// it is, without allocating.
func shownKey(cl *ruleset.Limit, group func() string, o *observe.Outcome) (string, bool) {
	var vals []string
	for _, p := range cl.Parts {
		v := ""
		if p.Kind == config.KeyIP {
			v = group()
		} else {
			kv, _ := o.Key(p)
			v = kv.Value
		}
		if p.Kind != config.KeyIP && v == "" && cl.Missing != config.MissingShare && cl.Missing != config.MissingDeny {
			return group(), true // counted as by: ip
		}
		if len(cl.Parts) == 1 {
			return v, false
		}
		vals = append(vals, v)
	}
	return strings.Join(vals, ", "), false
}
