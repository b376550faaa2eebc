package config

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// EstimateBytesPerToken is the bytes of a request body counted as one
// token of its prompt by reserve: estimate: English text runs about four
// characters a token in the tokenizers of OpenAI's and Anthropic's models,
// and the JSON around the prompt makes the estimate err high.
const EstimateBytesPerToken = 4

// DefaultCostHeader is the response header a cost: {header: ...} rule
// usually names (docs/rules.md, "Request cost").
const DefaultCostHeader = "X-RateLimit-Cost"

// Cost is what one request costs a limit, in the limit's units (the
// docs/rules.md, "Request cost"). The zero value is a cost of one unit, known
// when the request is decided.
type Cost struct {
	// Units is the fixed cost of a request, known when it is decided; 0
	// means 1. It is 0 when Header is set.
	Units int64
	// Header, when not empty, is the canonical name of the upstream
	// response header that reports the cost: the request is admitted when
	// the limit has room for Min units and charged the reported cost when
	// the response's headers arrive.
	Header string
	// Min is the room a request with a Header cost needs to be admitted,
	// and what it is charged when the header is missing or not a whole
	// number ≥ 0. 1 unless the file sets it.
	Min int64
	// Max caps the reported cost. The limit's capacity unless the file
	// sets it.
	Max int64
	// Keep reports whether the header is passed on to the client; it is
	// removed otherwise.
	Keep bool
	// Body, when not empty, are the field paths of the response body
	// whose sum is the cost (tokens.go); Header is then "".
	Body []usage.Path
	// Reserve is what a request with a Body cost is charged when it is
	// admitted, and needs room for; what the response reports above it
	// is charged when the response ends. 0 for none: the request then
	// needs room for Min and is charged only at the end.
	Reserve int64
	// Estimate reports whether the reserve is estimated from the
	// request's body (reserve: estimate): its max_tokens (or
	// max_completion_tokens, max_output_tokens) and a prompt of one token
	// per EstimateBytesPerToken bytes of the body, capped by Max; Max
	// when the body gives no max_tokens or cannot be read. Reserve is
	// then 0.
	Estimate bool
	// ReserveHeader, when not empty, is the canonical name of a request
	// header whose whole number, capped by Max, raises the request's
	// reserve above Reserve; it never lowers it (ReserveFor).
	ReserveHeader string
	// Inspect caps the bytes of a JSON body, or of one event of a
	// stream, that are read for a Body cost; 0 means
	// usage.DefaultInspect.
	Inspect int
	// Price, when not nil, prices the input and output tokens the
	// response reports by its model (price.go): the cost is then money,
	// in micro-units of the prices' currency, and Body holds
	// usage.PricedPaths.
	Price *usage.Prices
	// Line is where cost is set, 0 when it is not.
	Line int
}

// Need returns the units a request must have room for: Units (at least
// 1) for a fixed cost, Min for a Header cost.
func (c *Cost) Need() int64 {
	switch {
	case len(c.Body) > 0 && c.Reserve > 0:
		return c.Reserve
	case c.Header != "" || len(c.Body) > 0:
		return c.Min
	case c.Units > 0:
		return c.Units
	}
	return 1
}

// String returns the cost as docs/rules.md writes it: "1", "100", or
// "header X-RateLimit-Cost (min 1, max 1000)".
func (c Cost) String() string {
	if len(c.Body) > 0 {
		return c.bodyString()
	}
	if c.Header == "" {
		return strconv.FormatInt(c.Need(), 10)
	}
	s := fmt.Sprintf("header %s (min %d, max %d", c.Header, c.Min, c.Max)
	if c.Keep {
		s += ", kept"
	}
	return s + ")"
}

// Count says which requests a limit counts: only those whose response
// status is in Status, once the response's headers arrive (docs/rules.md,
// "Counting only some responses"). A nil *Count counts every admitted
// request when it is decided.
type Count struct {
	// Status are the ranges of statuses that count, in file order.
	Status []StatusRange
	// Line is where count is set.
	Line int
}

// StatusRange is the statuses Lo through Hi.
type StatusRange struct{ Lo, Hi int }

// String writes r as the rule file may: 401, 5xx or 400-499.
func (r StatusRange) String() string {
	switch {
	case r.Lo == r.Hi:
		return strconv.Itoa(r.Lo)
	case r.Lo%100 == 0 && r.Hi == r.Lo+99:
		return strconv.Itoa(r.Lo/100) + "xx"
	}
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
}

// Matches reports whether a response with status code counts. A nil
// Count matches every status.
func (c *Count) Matches(code int) bool {
	if c == nil {
		return true
	}
	for _, r := range c.Status {
		if code >= r.Lo && code <= r.Hi {
			return true
		}
	}
	return false
}

// String returns the statuses as a comma-separated list.
func (c *Count) String() string {
	if c == nil {
		return ""
	}
	s := make([]string, len(c.Status))
	for i, r := range c.Status {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

var (
	costFields  = []string{"header", "body", "price", "max", "min", "keep", "reserve", "reserveHeader", "inspect"}
	countFields = []string{"status"}
)

// costNeeds says what a cost must be, for messages.
const costNeeds = "a whole number of units ≥ 1, or a mapping like {header: X-RateLimit-Cost, max: 1000}"

// cost returns the Cost of a cost field for a limit with params, which
// are valid.
func (p *parser) cost(f field, params *limit.Params) (Cost, bool) {
	c := Cost{Line: f.line}
	capacity := int64(limit.MaxLimit)
	if params.Limit > 0 {
		capacity = params.Capacity()
	}
	if f.val.Kind != yaml.MappingNode {
		if _, _, kind := number(f.val); kind == notNumber {
			p.errorf(f.line, "cost must be %s, not %s", costNeeds, p.describe(f.val))
			return c, false
		}
		v, ok := p.integer(f)
		switch {
		case !ok:
			return c, false
		case v < 1:
			p.errorf(f.line, "cost %d is below 1; a request costs at least one unit (to count only some responses, use count)", v)
			return c, false
		case v > capacity:
			p.errorf(f.line, "cost %d is above the limit's capacity %d, so no request could ever pass; lower the cost or raise the limit", v, capacity)
			return c, false
		}
		c.Units = v
		return c, true
	}
	fs := p.fields(f.val, "cost", costFields)
	ok := true
	h, has := fs["header"]
	bf, hasBody := fs["body"]
	pf, hasPrice := fs["price"]
	switch {
	case hasPrice && (has || hasBody):
		p.errorf(pf.line, "cost sets price with header or body; a priced cost reads the input and output tokens of the response body itself, so remove header and body")
		ok = false
	case hasPrice:
		c.Price, ok = p.prices(pf)
		c.Body, hasBody = usage.PricedPaths(), true
	case has && hasBody:
		p.errorf(bf.line, "cost sets both header and body; the cost is reported in one of them, so keep one")
		ok = false
	case hasBody:
		c.Body, ok = p.bodyPaths(bf)
	case !has:
		p.errorf(f.line, "cost has no header; name the response header that reports the cost, like header: %s, or the field of the response body, like body: usage.total_tokens, or price the tokens, like price: {gpt-4o: {input: 2.50, output: 10}}, or write a fixed cost as a number", DefaultCostHeader)
		ok = false
	default:
		if name, good := p.str(h); !good {
			ok = false
		} else if !validHeaderName(name) {
			p.errorf(h.line, "cost header %q is not a valid header name; use letters, digits and - like %s", name, DefaultCostHeader)
			ok = false
		} else {
			c.Header = textproto.CanonicalMIMEHeaderKey(name)
		}
	}
	c.Min, c.Max = 1, capacity
	if m, has := fs["min"]; has {
		v, good := p.integer(m)
		switch {
		case !good:
			ok = false
		case v < 1:
			p.errorf(m.line, "cost min %d is below 1; it is the room a request needs to be admitted, and what a response without the header is charged", v)
			ok = false
		case v > capacity:
			p.errorf(m.line, "cost min %d is above the limit's capacity %d, so no request could ever pass", v, capacity)
			ok = false
		default:
			c.Min = v
		}
	}
	if m, has := fs["max"]; has {
		v, good := p.integer(m)
		switch {
		case !good:
			ok = false
		case v < 1 || v > limit.MaxLimit:
			p.errorf(m.line, "cost max %d is outside 1..%d; it caps the cost the upstream may report", v, int64(limit.MaxLimit))
			ok = false
		default:
			c.Max = v
		}
	}
	if ok && c.Min > c.Max {
		line := f.line
		if m, has := fs["min"]; has {
			line = m.line
		}
		p.errorf(line, "cost min %d is above cost max %d; lower min or raise max", c.Min, c.Max)
		ok = false
	}
	if k, has := fs["keep"]; has {
		v, good := p.boolean(k)
		c.Keep, ok = v, ok && good
	}
	if !p.bodyOptions(fs, &c, hasBody) {
		ok = false
	}
	return c, ok
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110's
// token).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// countNeeds says what count must be, for messages.
const countNeeds = `a mapping like {status: [401, 403, "5xx", "400-499"]}`

// count returns the Count of a count field.
func (p *parser) count(f field) (*Count, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.errorf(f.line, "count must be %s, not %s", countNeeds, p.describe(f.val))
		return nil, false
	}
	fs := p.fields(f.val, "count", countFields)
	s, has := fs["status"]
	if !has {
		p.errorf(f.line, "count has no status; list the response statuses that count, like status: [401, 403]")
		return nil, false
	}
	items, isList := oneOrList(s)
	switch {
	case !isList:
		p.errorf(s.line, "count status must be a status, a class like \"5xx\", a range like \"400-499\", or a list of them, not %s", p.describe(s.val))
		return nil, false
	case len(items) == 0:
		p.errorf(s.line, "count status is an empty list, so nothing would ever count; list the statuses that count, like [401, 403]")
		return nil, false
	}
	c := &Count{Line: f.line}
	ok := true
	for _, it := range items {
		r, err := parseStatus(it.node)
		if err != "" {
			p.errorf(it.line, "count status %s %s", p.describe(it.node), err)
			ok = false
			continue
		}
		c.Status = append(c.Status, r)
	}
	return c, ok
}

// parseStatus reads one entry of a count status list: a status (401, or
// "401" as XML writes it), a class ("5xx") or a range ("400-499"). It
// returns what is wrong otherwise.
func parseStatus(n *yaml.Node) (StatusRange, string) {
	const want = "is not a status (100-599), a class like \"5xx\" or a range like \"400-499\""
	status := func(s string) (int, bool) {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		return v, err == nil && v >= 100 && v <= 599
	}
	if n.Kind != yaml.ScalarNode {
		return StatusRange{}, want
	}
	if i, _, kind := number(n); kind != notNumber {
		if kind != wholeNumber || i < 100 || i > 599 {
			return StatusRange{}, want
		}
		return StatusRange{int(i), int(i)}, ""
	}
	if n.ShortTag() != "!!str" {
		return StatusRange{}, want
	}
	v := strings.TrimSpace(n.Value)
	if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") && v[0] >= '1' && v[0] <= '5' {
		lo := int(v[0]-'0') * 100
		return StatusRange{lo, lo + 99}, ""
	}
	if a, b, dash := strings.Cut(v, "-"); dash {
		lo, ok1 := status(a)
		hi, ok2 := status(b)
		switch {
		case !ok1 || !ok2:
			return StatusRange{}, want
		case lo > hi:
			return StatusRange{}, "is a range that ends before it starts; write the lower status first"
		}
		return StatusRange{lo, hi}, ""
	}
	if s, ok := status(v); ok {
		return StatusRange{s, s}, ""
	}
	return StatusRange{}, want
}

// costAndCount reads the cost and count fields of a limit with params
// (the app's total or a rule) from fs.
func (p *parser) costAndCount(fs map[string]field, params *limit.Params) (Cost, *Count, bool) {
	var c Cost
	var n *Count
	ok := true
	if f, has := fs["cost"]; has {
		c, ok = p.cost(f, params)
	}
	if f, has := fs["count"]; has {
		var good bool
		n, good = p.count(f)
		ok = ok && good
	}
	return c, n, ok
}
