package ruleset

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// Explain describes, for the match command, which of rs's rules apply to a
// request and why. app is the caller's app ID ("" for none).
func (rs *Set) Explain(app, method, path string) (string, error) {
	return rs.ExplainRequest(ExplainRequest{App: app, Method: method, Target: path})
}

// ExplainRequest is a request as ExplainRequest judges it.
type ExplainRequest struct {
	// App is the caller's app ID ("" for none).
	App string
	// Method is the request's method.
	Method string
	// Target is the path, with the query string if any.
	Target string
	// Host is the request's Host header, which chooses its route; ""
	// matches only the routes for every host.
	Host string
	// Header holds the request's headers (canonical names), for limits
	// keyed on them.
	Header http.Header
	// ClientIP is the client's address; invalid if not known.
	ClientIP netip.Addr
	// Claims are the claims of the caller's token, as if verified, for
	// limits keyed on them; nil for a request without a token.
	Claims map[string]string
}

// ExplainRequest describes, for the match command, which of rs's rules
// apply to q and why, and the counter key each limit would count it
// under (the client address grouped by the default prefixes).
func (rs *Set) ExplainRequest(q ExplainRequest) (string, error) {
	app, method, path := q.App, q.Method, q.Target
	var rawQuery string
	path, rawQuery, _ = strings.Cut(path, "?")
	clean, err := trie.Normalize(path)
	if err != nil {
		return "", fmt.Errorf("path %q would be rejected with 400: %w", path, err)
	}
	if app != "" {
		if _, err := CheckAppID(app); err != nil {
			return "", fmt.Errorf("app ID %q would be rejected with 400 invalid_app_id: %w", app, err)
		}
	}
	if !ValidMethod(method) {
		return "", fmt.Errorf("method %q is not an HTTP method", method)
	}
	method = CanonicalMethod(method)
	var b strings.Builder
	if clean != path {
		fmt.Fprintf(&b, "path %q is normalized to %q\n", path, clean)
	}
	if method == http.MethodHead {
		b.WriteString("method HEAD is matched as GET, unless a rule lists HEAD\n")
	}
	b.WriteString(rs.explainRoute(q.Host, clean))
	sec, known := rs.Lookup(app)
	refused := false
	switch {
	case sec == nil:
		fmt.Fprintf(&b, "app %q is not configured and the rule file has no \"*\" section: forwarded unlimited (decision unmatched)\n", app)
		return b.String(), nil
	case known:
		fmt.Fprintf(&b, "app %q: section at line %d\n", app, rs.sectionLine(sec.App))
		if n := len(sec.Keys); n > 0 {
			fmt.Fprintf(&b, "  requires an API key: one of the app's %d key(s) in the key header (--key-header), else 401\n", n)
		}
	default:
		fmt.Fprintf(&b, "app %q is not configured: unknown caller, section \"*\" (counted per %s)\n", app, byName(sec.By))
	}
	if sec.Total != nil {
		fmt.Fprintf(&b, "  applies: app total %s\n", describe(sec.Total))
		line, bad := explainKey(sec.Total, q, rawQuery)
		b.WriteString(line)
		refused = refused || bad
	} else {
		b.WriteString("  no app total\n")
	}
	if c := sec.Conc; c != nil && c != sec.Total {
		fmt.Fprintf(&b, "  applies: app concurrency: at most %d in flight\n", c.Conc)
		line, bad := explainKey(c, q, rawQuery)
		b.WriteString(line)
		refused = refused || bad
	}
	explainMethod := method
	if cl, _, ok := sec.trie.Match(method, clean); method == http.MethodHead && !(ok && cl.head) {
		explainMethod = http.MethodGet
	}
	cands := sec.trie.Explain(explainMethod, clean)
	chosen, blocked := false, sec.Total != nil && sec.Total.Params.Limit == 0 && !sec.Total.Shadow
	for _, c := range cands {
		var mark string
		if c.Chosen {
			mark = "  applies:"
			chosen = true
			blocked = blocked || c.Value.Params.Limit == 0 && !c.Value.Shadow
		} else {
			mark = "  skipped:"
		}
		fmt.Fprintf(&b, "%s rule %s %s — %s\n", mark, c.Pattern, describe(c.Value), c.Reason)
		if c.Chosen && (c.Value.Params.Limit != limit.Unlimited || c.Value.Conc > 0) {
			line, bad := explainKey(c.Value, q, rawQuery)
			b.WriteString(line)
			refused = refused || bad
		}
	}
	if !chosen {
		b.WriteString("  no api rule matches\n")
	}
	switch {
	case refused:
		b.WriteString("decision: refused with 400 (see above)\n")
	case sec.Total == nil && sec.Conc == nil && !chosen:
		b.WriteString("decision: forwarded without a limit (unmatched)\n")
	case blocked:
		b.WriteString("decision: never admitted (blocked by a limit of 0)\n")
	default:
		b.WriteString("decision: admitted while every applicable limit has room\n")
	}
	return b.String(), nil
}

// explainKey says, as a line of Explain, which counter of cl request q
// would count against, or why it would be refused; "" for a limit with
// one counter.
func explainKey(cl *Limit, q ExplainRequest, rawQuery string) (line string, refused bool) {
	group := func() string { return AddrGroup(q.ClientIP, DefaultIPv4Prefix, DefaultIPv6Prefix) }
	if !q.ClientIP.IsValid() {
		group = func() string { return "<client address group>" }
	}
	switch cl.Kind {
	case KeyIP:
		return "    counted per client address group: key " + cl.Key + "|" + group() + "\n", false
	case KeyAttrs:
		claims := func(string) (string, string) { return "", "" }
		if q.Claims != nil {
			claims = jwtauth.ClaimsOf(q.Claims).Value
		}
		key, code, msg := cl.AttrKey(rawQuery, group, requestValues{q.Header, rawQuery, claims})
		if code != "" {
			return "    counted by " + string(cl.By) + ": refused with 400 " + code + ": " + msg + "\n", true
		}
		return "    counted by " + string(cl.By) + " (missing: " + string(cl.Missing) + "): key " + key + "\n", false
	}
	return "", false
}

func (rs *Set) sectionLine(app string) int {
	for _, a := range rs.Source.Apps {
		if a.ID == app {
			return a.Line
		}
	}
	return 0
}

// byName says what one counter of a section with by is shared by.
func byName(by config.By) string {
	switch by {
	case config.ByIP:
		return "client IP"
	case config.ByApp, config.ByGlobal:
		return "section"
	}
	return string(by)
}

// describe says everything about a limit that decides a request.
func describe(cl *Limit) string {
	p := cl.Params
	var b strings.Builder
	switch p.Limit {
	case limit.Unlimited:
		if cl.Conc > 0 {
			b.WriteString("no rate limit")
		} else {
			b.WriteString("unlimited")
		}
	case 0:
		b.WriteString("blocks every request")
	default:
		fmt.Fprintf(&b, "%d per %s (%s", p.Limit, p.Unit(), p.Algorithm)
		if p.Calendar != "" {
			fmt.Fprintf(&b, ", in %s", p.Zone)
		}
		if p.Precision > 0 {
			fmt.Fprintf(&b, ", precision %d", p.Precision)
		}
		if p.Burst > 0 {
			fmt.Fprintf(&b, ", burst %d", p.Burst)
		}
		if p.Warmup > 0 {
			fmt.Fprintf(&b, ", warmup %s", p.Warmup)
		}
		b.WriteString(")")
		if p.Lock > 0 {
			fmt.Fprintf(&b, ", lockSeconds %s: once limited, denied for that long", strconv.FormatFloat(p.Lock.Seconds(), 'f', -1, 64))
		}
		switch {
		case cl.Cost.Header != "" || cl.BodyCost():
			fmt.Fprintf(&b, ", cost from the response's %s", cl.Cost)
		case cl.Cost.Units > 1:
			fmt.Fprintf(&b, ", cost %d units a request", cl.Cost.Units)
		}
		if cl.Count != nil {
			fmt.Fprintf(&b, ", counts only responses with status %s", cl.Count)
		}
	}
	if cl.Conc > 0 {
		fmt.Fprintf(&b, ", at most %d in flight", cl.Conc)
	}
	if cl.Shadow {
		b.WriteString(" [shadow: never blocks]")
	}
	if cl.Plan != "" {
		b.WriteString(" [from plan " + cl.Plan + "]")
	}
	return b.String()
}

// requestValues reads a limit's key parts from the request Explain
// describes.
type requestValues struct {
	header   http.Header
	rawQuery string
	claim    func(string) (string, string)
}

func (v requestValues) AttrValue(p config.KeyPart) (string, string) {
	return AttrValue(v.header, v.rawQuery, p, v.claim)
}
