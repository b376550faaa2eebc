package proxy

import (
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// readKeys records in o the values of cl's header, query and claim parts
// that o does not hold yet. A request's values are read from it once,
// here: its counter keys (ruleset.Limit.AttrKey), the keys it is listed
// under (shownKey, /top) and the access log all take them from o, so that
// they cannot differ.
func readKeys(r *http.Request, cl *ruleset.Limit, o *observe.Outcome) {
	for _, p := range cl.Parts {
		if p.Kind == config.KeyIP {
			continue
		}
		if _, ok := o.Key(p); !ok {
			v, bad := ruleset.AttrValue(r.Header, r.URL.RawQuery, p, o.ClaimValue)
			o.AddKey(observe.KeyValue{Part: p, Value: v, Bad: bad})
		}
	}
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
