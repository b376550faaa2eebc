package config

import (
	"fmt"
	"net/textproto"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file reads a cost the response body reports, such as the tokens
// of an LLM API: cost: {body: usage.total_tokens, reserve: 500}
// (docs/plans-and-tokens.md).

// maxInspect bounds the inspect setting: what one response may cost in
// memory.
const maxInspect = 64 << 20

// bodyPaths reads the body field: a field path, or a list of them whose
// values add up.
func (p *parser) bodyPaths(f field) ([]usage.Path, bool) {
	items, isList := oneOrList(f)
	if !isList || len(items) == 0 {
		p.errorf(f.line, "cost body must be a field path of the response body like usage.total_tokens, or a list of them that add up, not %s", p.describe(f.val))
		return nil, false
	}
	var out []usage.Path
	ok := true
	for _, it := range items {
		if it.node.Kind != yaml.ScalarNode || it.node.ShortTag() != "!!str" {
			p.errorf(it.line, "cost body must be a field path like usage.total_tokens, not %s", p.describe(it.node))
			ok = false
			continue
		}
		// XML writes a list as one attribute: body="a.b c.d" or "a.b,c.d".
		for _, s := range strings.FieldsFunc(it.node.Value, func(r rune) bool { return r == ',' || r == ' ' }) {
			path, err := usage.ParsePath(s)
			if err != nil {
				p.errorf(it.line, "cost body: %s", err)
				ok = false
				continue
			}
			out = append(out, path)
		}
	}
	if ok && len(out) == 0 {
		p.errorf(f.line, "cost body is empty; write the field path of the response body that reports the cost, like usage.total_tokens")
		ok = false
	}
	return out, ok
}

// bodyOptions reads reserve, reserveHeader and inspect into c, which only
// a body cost (hasBody) takes.
func (p *parser) bodyOptions(fs map[string]field, c *Cost, hasBody bool) bool {
	ok := true
	for _, name := range []string{"reserve", "reserveHeader", "inspect"} {
		if f, has := fs[name]; has && !hasBody {
			p.errorf(f.line, "cost %s applies only to a cost read from the response body (body: ...); remove it", name)
			ok = false
		}
	}
	if !hasBody {
		return ok
	}
	if f, has := fs["reserve"]; has {
		if n := f.val; n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			if strings.TrimSpace(n.Value) != "estimate" {
				p.errorf(f.line, "cost reserve %q is neither a whole number of units nor estimate (from the request's max_tokens and size)", n.Value)
				p.reserveHeaderAndInspect(fs, c)
				return false
			}
			c.Estimate = true
			return p.reserveHeaderAndInspect(fs, c) && ok
		}
		v, good := p.integer(f)
		switch {
		case !good:
			ok = false
		case v < 0 || v > c.Max:
			p.errorf(f.line, "cost reserve %d is outside 0..%d (cost max); it is what a request is charged when it is admitted", v, c.Max)
			ok = false
		default:
			c.Reserve = v
		}
	}
	return p.reserveHeaderAndInspect(fs, c) && ok
}

// reserveHeaderAndInspect reads reserveHeader and inspect into c.
func (p *parser) reserveHeaderAndInspect(fs map[string]field, c *Cost) bool {
	ok := true
	if f, has := fs["reserveHeader"]; has {
		if name, good := p.str(f); !good {
			ok = false
		} else if !validHeaderName(name) {
			p.errorf(f.line, "cost reserveHeader %q is not a valid header name", name)
			ok = false
		} else {
			c.ReserveHeader = textproto.CanonicalMIMEHeaderKey(name)
		}
	}
	if f, has := fs["inspect"]; has {
		v, good := p.integer(f)
		switch {
		case !good:
			ok = false
		case v < 1024 || v > maxInspect:
			p.errorf(f.line, "cost inspect %d is outside 1024..%d; it is how many bytes of a JSON body, or of one event of a stream, are read for the cost", v, maxInspect)
			ok = false
		default:
			c.Inspect = int(v)
		}
	}
	return ok
}

// bodyString describes a body cost for /rules and match.
func (c *Cost) bodyString() string {
	ps := make([]string, len(c.Body))
	for i, p := range c.Body {
		ps[i] = p.String()
	}
	s := fmt.Sprintf("body %s (min %d, max %d", strings.Join(ps, "+"), c.Min, c.Max)
	if c.Price != nil {
		models := "models"
		if c.Price.Len() == 1 {
			models = "model"
		}
		s = fmt.Sprintf("price of %d %s in micro-units (min %d, max %d", c.Price.Len(), models, c.Min, c.Max)
	}
	if c.Reserve > 0 {
		s += fmt.Sprintf(", reserve %d", c.Reserve)
	}
	if c.Estimate {
		s += ", reserve estimate"
	}
	if c.ReserveHeader != "" {
		s += ", reserve from " + c.ReserveHeader
	}
	return s + ")"
}

// ReserveFor returns the reserve of a request whose header values of
// ReserveHeader are vals: their whole number capped by Max when it is
// above Reserve, else Reserve. A client may raise its reserve, never
// lower it below the configured one: a reserve is what keeps requests in
// flight together from overrunning the budget.
func (c *Cost) ReserveFor(vals []string) int64 {
	if c.ReserveHeader == "" || len(vals) != 1 {
		return c.Reserve
	}
	var n int64
	s := strings.TrimSpace(vals[0])
	if s == "" {
		return c.Reserve
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return c.Reserve
		}
		if n <= c.Max { // past Max the digits only matter as digits
			n = n*10 + int64(s[i]-'0')
		}
	}
	return max(min(n, c.Max), c.Reserve)
}
