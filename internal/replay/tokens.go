package replay

import (
	"encoding/json"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// bodyPaths returns the first field path of each cost the rules read from
// the response body (docs/plans-and-tokens.md), each once: the replay
// answers with a JSON body that reports the logged cost there.
func bodyPaths(src *config.Rules) []usage.Path {
	var out []usage.Path
	add := func(c config.Cost) {
		if len(c.Body) == 0 {
			return
		}
		p := c.Body[0]
		for _, q := range out {
			if q.String() == p.String() {
				return
			}
		}
		out = append(out, p)
	}
	if src == nil {
		return nil
	}
	for _, app := range src.Apps {
		add(app.TotalCost)
		for _, r := range app.Limits {
			add(r.Cost)
		}
	}
	return out
}

// usageBody returns a JSON document with cost at each of paths, or nil
// when cost is not a whole number.
func usageBody(paths []usage.Path, cost string) []byte {
	n, err := strconv.ParseInt(cost, 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	root := map[string]any{}
	for _, p := range paths {
		m := root
		for _, k := range p[:len(p)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[p[len(p)-1]] = n
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil
	}
	return b
}
