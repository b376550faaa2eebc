package proxy

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// RuleSet is a compiled rule file: a trie per app and the limits the
// request path needs, with every string it writes precomputed. It is
// immutable once built; a reload builds a new one and swaps it in.
type RuleSet struct {
	// Source is the rule file it was compiled from.
	Source *config.Rules
	// LoadedAt is when it was compiled.
	LoadedAt time.Time

	apps    map[string]*section
	unknown *section                 // the "*" section, nil if the file has none
	keyed   bool                     // some app has API keys
	keys    map[string]time.Duration // every compiledLimit.key, with its window
	opts    CompileOptions
	// keyHeaders are the headers some limit is keyed on, canonical, each
	// once: their underscore spellings are not forwarded (dropAliases).
	keyHeaders []string
	routes     *routeTable // nil when the file has no routes nor upstreams
}

// section is one app's compiled rules.
type section struct {
	app string
	// ipTag reports whether every limit of the section is by ip: only
	// then are its keys tagged by the client address group
	// (limit.CallerTag), spreading unknown callers over a Redis Cluster (a
	// key must always come with the same tag; see limit.Request.Tag).
	ipTag bool
	by    config.By           // the section's own by, for Explain
	keys  [][sha256.Size]byte // digests of the app's API keys; nil if none
	total *compiledLimit      // nil when the app has no total
	// conc is the limit of the app's concurrency: total when the app has
	// both, nil when it has no concurrency.
	conc *compiledLimit
	trie *trie.Trie[*compiledLimit]
	// all are the total and the rules, in file order (usage.go).
	all []*compiledLimit
}

// compiledLimit is one limit with what the request path writes about it.
type compiledLimit struct {
	app string
	api string // rule pattern; "" for an app total
	// head reports whether the rule lists HEAD among its methods: only
	// then does a HEAD request match it rather than GET's rules.
	head   bool
	params limit.Params
	// local are the params of --fail-mode local: params with Limit (and
	// Burst) scaled by the local share, decided in memory when the shared
	// store fails.
	local  limit.Params
	shadow bool
	// key is the counter key; for a by other than app or global a
	// suffix is appended after a "|" (the client address group, or the
	// values of attrKey), and callers past the store's key cap share
	// overflow.
	key, overflow string
	// kind, parts and missing say how the counter key of a request is
	// built: parts are those of by, missing what a missing header or
	// query value does.
	kind    keyKind
	by      config.By
	parts   []config.KeyPart
	missing config.Missing
	// claims reports whether by names a claim of the caller's token.
	claims bool
	// conc is the most requests in flight per key, 0 for no cap;
	// concLocal the same scaled by the local share (--fail-mode local).
	conc, concLocal int64
	// policy is the RateLimit-Policy item for this limit.
	policy string
	// name is the quoted policy name used in the RateLimit header.
	name string
	// The header values and the limited body that never change, built
	// once here rather than per request.
	policyHdr  []string // RateLimit-Policy of this limit alone
	pairPolicy []string // RateLimit-Policy of the section's total and this rule
	limitHdr   []string // X-RateLimit-Limit
	body429    []byte   // the limited body up to retryAfterSeconds' value
	// bodyBlocked is the whole body of a limit of 0; nil for others.
	bodyBlocked []byte
	// cost and count are what a request costs and which responses count
	// (docs/rules.md, "Request cost").
	cost  config.Cost
	count *config.Count
	// plan is the plan the rule comes from, "" for an app's own rule.
	plan string
	// maxDelay is how long a request over the limit may wait for room
	// (wait.go); 0 refuses at once.
	maxDelay time.Duration
}

// DefaultLocalShare is the share of each limit that one gateway admits on
// its own under --fail-mode local while Redis is down: right for a fleet
// of up to ten gateways, which together then admit at most the limit.
const DefaultLocalShare = 0.1

// CompileOptions are the settings of Compile that do not come from the
// rule file. The zero value gives the defaults.
type CompileOptions struct {
	// LocalShare scales the limits decided in memory under --fail-mode
	// local, in (0, 1]. 0 means DefaultLocalShare.
	LocalShare float64
	// NoJWT reports that callers' tokens are not verified (no
	// --jwt-jwks nor --jwt-hmac-secret-file): a limit keyed on a claim
	// is then an error naming its file and line, since no request could
	// ever carry the claim. Otherwise a request without a verified
	// token lacks every claim (see Missing).
	NoJWT bool
	// Routes, if not nil, builds the pools of the file's upstreams and
	// the reverse proxies of its routes; nil compiles routes that only
	// name themselves (match, replay).
	Routes *RouteOptions
}

// Compile builds a RuleSet from parsed rules with the default options.
func Compile(rules *config.Rules, now time.Time) (*RuleSet, error) {
	return CompileWith(rules, now, CompileOptions{})
}

// CompileWith builds a RuleSet from parsed rules. A reload compiles the new
// rules with the options of the rule set in force.
func CompileWith(rules *config.Rules, now time.Time, opts CompileOptions) (*RuleSet, error) {
	if opts.LocalShare == 0 {
		opts.LocalShare = DefaultLocalShare
	}
	if !(opts.LocalShare > 0 && opts.LocalShare <= 1) {
		return nil, fmt.Errorf("local share %v is outside (0, 1]", opts.LocalShare)
	}
	rs := &RuleSet{Source: rules, LoadedAt: now, apps: make(map[string]*section, len(rules.Apps)), keys: map[string]time.Duration{}, opts: opts}
	for i := range rules.Apps {
		app := &rules.Apps[i]
		sec := &section{
			app:   app.ID,
			ipTag: app.By == config.ByIP,
			by:    app.By,
			keys:  app.Keys,
			trie:  trie.New[*compiledLimit](trie.Options{CaseInsensitive: rules.CaseInsensitive}),
		}
		if opts.NoJWT && app.Total != nil && app.By.Claims() {
			return nil, noJWTError(rules.Path, app.Line, "app "+app.ID+"'s total", app.By)
		}
		if app.Total != nil && app.Total.Limit != limit.Unlimited {
			sec.total = newCompiledLimit(app.ID, "", nil, *app.Total, false, opts)
			sec.total.cost, sec.total.count = app.TotalCost, app.TotalCount
			sec.total.keyBy(app.By, app.Missing)
			rs.keys[sec.total.key] = sec.total.params.Window
			sec.all = append(sec.all, sec.total)
		}
		if app.Concurrency > 0 {
			if opts.NoJWT && app.By.Claims() {
				return nil, noJWTError(rules.Path, app.Line, "app "+app.ID+"'s concurrency", app.By)
			}
			sec.conc = appConcurrency(sec.total, app, opts)
		}
		for j := range app.Limits {
			r := &app.Limits[j]
			if by := cmp.Or(r.By, app.By); opts.NoJWT && by.Claims() {
				return nil, noJWTError(rules.Path, r.Line, "rule "+r.API, by)
			}
			cl := newCompiledLimit(app.ID, r.API, r.Methods, r.Params, r.Shadow, opts)
			cl.cost, cl.count, cl.plan, cl.maxDelay = r.Cost, r.Count, r.Plan, r.MaxDelay
			cl.keyBy(cmp.Or(r.By, app.By), cmp.Or(r.Missing, app.Missing))
			sec.ipTag = sec.ipTag && cl.kind == keyIP
			cl.head = slices.Contains(r.Methods, http.MethodHead)
			cl.setConcurrency(r.Concurrency, opts)
			rs.keys[cl.key] = cl.params.Window
			if t := sec.total; t != nil && !t.shadow && !cl.shadow {
				cl.pairPolicy = []string{t.policy + ", " + cl.policy}
			}
			if err := sec.trie.Insert(r.API, r.Methods, cl); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", rules.Path, r.Line, err)
			}
			sec.all = append(sec.all, cl)
		}
		rs.keyed = rs.keyed || len(app.Keys) > 0
		rs.addKeyHeaders(app.By)
		for j := range app.Limits {
			rs.addKeyHeaders(app.Limits[j].By)
		}
		if app.ID == config.UnknownApp {
			rs.unknown = sec
		} else {
			rs.apps[app.ID] = sec
		}
	}
	var err error
	if rs.routes, err = compileRoutes(rules, &opts); err != nil {
		return nil, err
	}
	return rs, nil
}

func newCompiledLimit(app, api string, methods []string, p limit.Params, shadow bool, opts CompileOptions) *compiledLimit {
	key := app + "|" + api
	if len(methods) > 0 {
		key += "|" + strings.Join(methods, ",")
	}
	name := app + api
	if len(methods) > 0 {
		name += " " + strings.Join(methods, ",")
	}
	w := int64((p.Window + time.Second - 1) / time.Second)
	quoted := sfString(name)
	cl := &compiledLimit{
		app:      app,
		api:      api,
		params:   p,
		local:    p.Scaled(opts.LocalShare),
		shadow:   shadow,
		key:      key,
		overflow: key + "|overflow",
		name:     quoted,
		policy:   quoted + ";q=" + strconv.FormatInt(p.Limit, 10) + ";w=" + strconv.FormatInt(w, 10),
		limitHdr: []string{strconv.FormatInt(p.Limit, 10)},
	}
	cl.policyHdr = []string{cl.policy}
	cl.body429 = limitedBodyPrefix(app, api, p)
	if p.Limit == 0 {
		cl.bodyBlocked = blockedBody(app, api, p)
	}
	return cl
}

// addKeyHeaders adds the headers by is keyed on to rs.keyHeaders.
func (rs *RuleSet) addKeyHeaders(by config.By) {
	for _, p := range by.Parts() {
		if p.Kind == config.KeyHeader && !slices.Contains(rs.keyHeaders, p.Name) {
			rs.keyHeaders = append(rs.keyHeaders, p.Name)
		}
	}
}

// keyBy sets how cl's counter keys are built: by by, with missing for
// a missing header or query value ("" means config.MissingIP).
func (cl *compiledLimit) keyBy(by config.By, missing config.Missing) {
	cl.by, cl.kind, cl.parts, cl.claims = by, kindOf(by), by.Parts(), by.Claims()
	cl.missing = cmp.Or(missing, config.MissingIP)
}

// sfString renders s as a structured-field string (RFC 8941 §3.3.3),
// dropping characters a string cannot carry.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// OwnsKey reports whether a store key belongs to one of rs's limits: a
// limit's own key, or that key plus "|" and a client address group (or
// "overflow").
func (rs *RuleSet) OwnsKey(key string) bool {
	return KeyOf(key, func(limitKey string) bool { _, ok := rs.keys[limitKey]; return ok })
}

// KeyOf reports whether the store key belongs to a limit whose counter
// key has reports true: the key itself, or the key before its last "|".
func KeyOf(key string, has func(limitKey string) bool) bool {
	if has(key) {
		return true
	}
	if i := strings.LastIndexByte(key, '|'); i >= 0 {
		return has(key[:i])
	}
	return false
}

// LimitKeys returns the counter key of every limit of rs, with the
// limit's window.
func (rs *RuleSet) LimitKeys() map[string]time.Duration { return maps.Clone(rs.keys) }

// match returns the most specific rule of the section for a request with
// this method (upper-case) and normalized path. A HEAD request is matched
// as GET, as the upstream serves it (net/http, Express, Flask, Django,
// Rails and Spring serve HEAD with the GET handler), unless a rule lists
// HEAD itself.
func (sec *section) match(method, path string) (*compiledLimit, string, bool) {
	cl, pattern, ok := sec.trie.Match(method, path)
	if method == http.MethodHead && !(ok && cl.head) {
		return sec.trie.Match(http.MethodGet, path)
	}
	return cl, pattern, ok
}

// lookup returns the section for a caller's app ID and whether the app is
// configured. Callers with no or an unconfigured app ID get the "*"
// section, which may be nil.
func (rs *RuleSet) lookup(app string) (*section, bool) {
	if app != "" {
		if s, ok := rs.apps[app]; ok {
			return s, true
		}
	}
	return rs.unknown, false
}

// Explain describes, for the match command, which of rs's rules apply to a
// request and why. app is the caller's app ID ("" for none).
func (rs *RuleSet) Explain(app, method, path string) (string, error) {
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
func (rs *RuleSet) ExplainRequest(q ExplainRequest) (string, error) {
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
	if !validMethod(method) {
		return "", fmt.Errorf("method %q is not an HTTP method", method)
	}
	method = upperASCII(method)
	var b strings.Builder
	if clean != path {
		fmt.Fprintf(&b, "path %q is normalized to %q\n", path, clean)
	}
	if method == http.MethodHead {
		b.WriteString("method HEAD is matched as GET, unless a rule lists HEAD\n")
	}
	b.WriteString(rs.explainRoute(q.Host, clean))
	sec, known := rs.lookup(app)
	refused := false
	switch {
	case sec == nil:
		fmt.Fprintf(&b, "app %q is not configured and the rule file has no \"*\" section: forwarded unlimited (decision unmatched)\n", app)
		return b.String(), nil
	case known:
		fmt.Fprintf(&b, "app %q: section at line %d\n", app, rs.sectionLine(sec.app))
		if n := len(sec.keys); n > 0 {
			fmt.Fprintf(&b, "  requires an API key: one of the app's %d key(s) in the key header (--key-header), else 401\n", n)
		}
	default:
		fmt.Fprintf(&b, "app %q is not configured: unknown caller, section \"*\" (counted per %s)\n", app, byName(sec.by))
	}
	if sec.total != nil {
		fmt.Fprintf(&b, "  applies: app total %s\n", describe(sec.total))
		line, bad := explainKey(sec.total, q, rawQuery)
		b.WriteString(line)
		refused = refused || bad
	} else {
		b.WriteString("  no app total\n")
	}
	if c := sec.conc; c != nil && c != sec.total {
		fmt.Fprintf(&b, "  applies: app concurrency: at most %d in flight\n", c.conc)
		line, bad := explainKey(c, q, rawQuery)
		b.WriteString(line)
		refused = refused || bad
	}
	explainMethod := method
	if cl, _, ok := sec.trie.Match(method, clean); method == http.MethodHead && !(ok && cl.head) {
		explainMethod = http.MethodGet
	}
	cands := sec.trie.Explain(explainMethod, clean)
	chosen, blocked := false, sec.total != nil && sec.total.params.Limit == 0 && !sec.total.shadow
	for _, c := range cands {
		var mark string
		if c.Chosen {
			mark = "  applies:"
			chosen = true
			blocked = blocked || c.Value.params.Limit == 0 && !c.Value.shadow
		} else {
			mark = "  skipped:"
		}
		fmt.Fprintf(&b, "%s rule %s %s — %s\n", mark, c.Pattern, describe(c.Value), c.Reason)
		if c.Chosen && (c.Value.params.Limit != limit.Unlimited || c.Value.conc > 0) {
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
	case sec.total == nil && sec.conc == nil && !chosen:
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
func explainKey(cl *compiledLimit, q ExplainRequest, rawQuery string) (line string, refused bool) {
	group := func() string { return addrGroup(q.ClientIP, DefaultIPv4Prefix, DefaultIPv6Prefix) }
	if !q.ClientIP.IsValid() {
		group = func() string { return "<client address group>" }
	}
	switch cl.kind {
	case keyIP:
		return "    counted per client address group: key " + cl.key + "|" + group() + "\n", false
	case keyAttrs:
		r := &http.Request{Header: q.Header, URL: &url.URL{RawQuery: rawQuery}}
		if r.Header == nil {
			r.Header = http.Header{}
		}
		o := &observe.Outcome{}
		if q.Claims != nil {
			o.Claims = jwtauth.ClaimsOf(q.Claims)
		}
		readKeys(r, cl, o)
		key, code, msg := attrKey(r, cl, group, o)
		if code != "" {
			return "    counted by " + string(cl.by) + ": refused with 400 " + code + ": " + msg + "\n", true
		}
		return "    counted by " + string(cl.by) + " (missing: " + string(cl.missing) + "): key " + key + "\n", false
	}
	return "", false
}

func (rs *RuleSet) sectionLine(app string) int {
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
func describe(cl *compiledLimit) string {
	p := cl.params
	var b strings.Builder
	switch p.Limit {
	case limit.Unlimited:
		if cl.conc > 0 {
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
		case cl.cost.Header != "" || cl.bodyCost():
			fmt.Fprintf(&b, ", cost from the response's %s", cl.cost)
		case cl.cost.Units > 1:
			fmt.Fprintf(&b, ", cost %d units a request", cl.cost.Units)
		}
		if cl.count != nil {
			fmt.Fprintf(&b, ", counts only responses with status %s", cl.count)
		}
	}
	if cl.conc > 0 {
		fmt.Fprintf(&b, ", at most %d in flight", cl.conc)
	}
	if cl.shadow {
		b.WriteString(" [shadow: never blocks]")
	}
	if cl.plan != "" {
		b.WriteString(" [from plan " + cl.plan + "]")
	}
	return b.String()
}

// noJWTError is the error of a limit keyed on a claim when tokens are not
// verified.
func noJWTError(path string, line int, what string, by config.By) error {
	return fmt.Errorf("%s:%d: %s counts by %s, a claim of a verified JWT, but callers' tokens are not verified: set --jwt-jwks or --jwt-hmac-secret-file, or count by something else", path, line, what, by)
}
