package config

import (
	"net/http"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// By says what one counter of a limit is shared by, as the rule file
// writes it: ByApp, ByIP, ByGlobal, "header:NAME", "query:NAME",
// "claim:NAME", or a combination of ip, headers, query parameters and
// claims joined by commas
// ("ip,header:X-User-Id": one counter per pair). Header names are
// canonical (http.CanonicalHeaderKey). See docs/rules.md, "Rule file".
type By string

// The values of By that name no request attribute.
const (
	ByIP     By = "ip"     // one counter per client address group (default for "*")
	ByApp    By = "app"    // one counter per app ID (default for configured apps)
	ByGlobal By = "global" // one counter for every caller of the section
)

// MaxKeyNameLen is the longest header or query parameter name a by may
// name.
const MaxKeyNameLen = 128

// KeyKind is the kind of request attribute a part of a counter key is.
type KeyKind uint8

// The values of KeyKind.
const (
	KeyIP     KeyKind = iota + 1 // the client address group
	KeyHeader                    // a request header
	KeyQuery                     // a query parameter
	KeyClaim                     // a claim of the caller's verified JWT
	KeyBody                      // a field of the request's JSON body (bodykey.go)
)

// KeyPart is one request attribute a counter key is made of.
type KeyPart struct {
	Kind KeyKind
	// Name is the header (canonical), query parameter or claim name,
	// or the body field's dotted path; "" for KeyIP.
	Name string
}

// String returns p as the rule file writes it: ip, header:NAME or
// query:NAME.
func (p KeyPart) String() string {
	switch p.Kind {
	case KeyHeader:
		return "header:" + p.Name
	case KeyQuery:
		return "query:" + p.Name
	case KeyClaim:
		return "claim:" + p.Name
	case KeyBody:
		return "body:" + p.Name
	}
	return string(ByIP)
}

// Parts returns the request attributes b keys its counters on, in the
// order written: none for ByApp and ByGlobal (one counter for the app, or
// for the section). b must be valid (as Parse returns it).
func (b By) Parts() []KeyPart {
	if b == "" || b == ByApp || b == ByGlobal {
		return nil
	}
	var parts []KeyPart
	for s := range strings.SplitSeq(string(b), ",") {
		switch kind, name, _ := strings.Cut(s, ":"); kind {
		case "header":
			parts = append(parts, KeyPart{Kind: KeyHeader, Name: name})
		case "query":
			parts = append(parts, KeyPart{Kind: KeyQuery, Name: name})
		case "claim":
			parts = append(parts, KeyPart{Kind: KeyClaim, Name: name})
		case "body":
			parts = append(parts, KeyPart{Kind: KeyBody, Name: name})
		default:
			parts = append(parts, KeyPart{Kind: KeyIP})
		}
	}
	return parts
}

// Claims reports whether b names a claim: only callers with a verified
// JWT can be counted by it.
func (b By) Claims() bool {
	return slices.ContainsFunc(b.Parts(), func(p KeyPart) bool { return p.Kind == KeyClaim })
}

// Attributes reports whether b names a header, a query parameter or a
// claim: only then can a request lack what its counter is keyed on (see
// Missing).
func (b By) Attributes() bool {
	return slices.ContainsFunc(b.Parts(), func(p KeyPart) bool { return p.Kind != KeyIP })
}

// Missing says what happens to a request that lacks an attribute its
// limit's counter is keyed on (a header, query parameter or claim of By).
type Missing string

// The values of Missing.
const (
	// MissingIP counts the request per client address group instead,
	// as by: ip would (the default).
	MissingIP Missing = "ip"
	// MissingShare counts every request that lacks it against one
	// counter of the limit.
	MissingShare Missing = "share"
	// MissingDeny refuses the request with 400 missing_key.
	MissingDeny Missing = "deny"
)

const byHelp = "use app, ip, global, header:NAME, query:NAME, claim:NAME, body:FIELD, or a list of ip, header:NAME, query:NAME, claim:NAME and body:FIELD for one counter per combination"

// by returns the value of a by field: a string, a list of strings, or a
// string of comma-separated parts, in canonical form.
func (p *parser) by(f field) (By, bool) {
	type item struct {
		s    string
		line int
	}
	var items []item
	switch n := f.val; {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		for s := range strings.SplitSeq(n.Value, ",") {
			items = append(items, item{strings.TrimSpace(s), f.line})
		}
	case n.Kind == yaml.SequenceNode:
		if len(n.Content) == 0 {
			p.errorf(f.line, "by is an empty list; %s", byHelp)
			return "", false
		}
		for _, c := range n.Content {
			c := deref(c)
			if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!str" {
				p.errorf(c.Line, "each entry of by must be a string like ip or header:X-User-Id, not %s", p.describe(c))
				return "", false
			}
			items = append(items, item{strings.TrimSpace(c.Value), c.Line})
		}
	default:
		p.wrongType(f, "a string or a list of strings")
		return "", false
	}
	if len(items) == 1 {
		switch b := By(items[0].s); b {
		case ByApp, ByIP, ByGlobal:
			return b, true
		}
	}
	var parts []string
	for _, it := range items {
		kind, name, hasName := strings.Cut(it.s, ":")
		var part string
		switch {
		case it.s == string(ByApp) || it.s == string(ByGlobal):
			p.errorf(it.line, "by %s cannot be combined with other parts: it means one counter for the whole %s; list only ip, header:NAME, query:NAME and claim:NAME", it.s, map[string]string{"app": "app", "global": "section"}[it.s])
			return "", false
		case it.s == string(ByIP):
			part = it.s
		case !hasName || kind != "header" && kind != "query" && kind != "claim" && kind != "body":
			p.errorf(it.line, "by %q is not valid; %s", it.s, byHelp)
			return "", false
		case name == "":
			p.errorf(it.line, "by %q names no %s; write %s:NAME, like %s", it.s, kind, kind, map[string]string{"header": "header:X-User-Id", "query": "query:user", "claim": "claim:sub", "body": "body:model"}[kind])
			return "", false
		case len(name) > MaxKeyNameLen:
			p.errorf(it.line, "by %s: the name is longer than %d bytes", kind, MaxKeyNameLen)
			return "", false
		case kind == "header" && !validToken(name):
			p.errorf(it.line, "by %q: %q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", it.s, name)
			return "", false
		case kind == "header":
			part = "header:" + http.CanonicalHeaderKey(name)
		case kind == "body":
			if msg := checkBodyPath(name); msg != "" {
				p.errorf(it.line, "by %q: %s", it.s, msg)
				return "", false
			}
			part = "body:" + name
		case !validQueryName(name):
			p.errorf(it.line, "by %q: a %s name here is printable ASCII without spaces or commas", it.s, map[string]string{"query": "query parameter", "claim": "claim"}[kind])
			return "", false
		case kind == "claim":
			part = "claim:" + name
		default:
			part = "query:" + name
		}
		if slices.Contains(parts, part) {
			p.errorf(it.line, "by lists %s twice; list it once", part)
			return "", false
		}
		parts = append(parts, part)
	}
	return By(strings.Join(parts, ",")), true
}

// missing returns the value of a missing field.
func (p *parser) missing(f field) (Missing, bool) {
	v, ok := p.str(f)
	if !ok {
		return "", false
	}
	switch m := Missing(v); m {
	case MissingIP, MissingShare, MissingDeny:
		return m, true
	}
	p.errorf(f.line, "missing %q is not valid; use ip (count the caller per client address, the default), share (one counter for every caller without it) or deny (refuse with 400)", v)
	return "", false
}

// validToken reports whether s is an HTTP token (RFC 9110 §5.6.2), as a
// header name must be.
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// validQueryName reports whether s can be named in a by: printable ASCII
// other than space and comma (which separates the parts of a by string).
func validQueryName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == ',' {
			return false
		}
	}
	return s != ""
}
