package ruleset

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"iter"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// Set is a compiled rule file: a trie per app and the limits the
// request path needs, with every string it writes precomputed. It is
// immutable once built, and so safe for concurrent use; a reload builds
// a new one and swaps it in.
type Set struct {
	// Source is the rule file it was compiled from.
	Source *config.Rules
	// LoadedAt is when it was compiled.
	LoadedAt time.Time

	apps    map[string]*Section
	unknown *Section                 // the "*" section, nil if the file has none
	keyed   bool                     // some app has API keys
	keys    map[string]time.Duration // every Limit.Key, with its window
	// keyHeaders are the headers some limit is keyed on, canonical, each
	// once: their underscore spellings are not forwarded.
	keyHeaders []string
	routes     *routeTable // nil when the file has no routes nor upstreams
}

// Section is one app's compiled rules. Its fields must not be modified.
type Section struct {
	// App is the app ID, config.UnknownApp for the "*" section.
	App string
	// IPTag reports whether every limit of the section is by ip: only
	// then are its keys tagged by the client address group
	// (limit.CallerTag), spreading unknown callers over a Redis Cluster (a
	// key must always come with the same tag; see limit.Request.Tag).
	IPTag bool
	By    config.By           // the section's own by, for Explain
	Keys  [][sha256.Size]byte // digests of the app's API keys; nil if none
	Total *Limit              // nil when the app has no total
	// Conc is the limit of the app's concurrency: Total when the app has
	// both, nil when it has no concurrency.
	Conc *Limit
	trie *trie.Trie[*Limit]
	// all are the total and the rules, in file order (Usage).
	all []*Limit
}

// Limit is one limit with what the request path writes about it. Its
// fields must not be modified: requests on every goroutine read them.
type Limit struct {
	App string
	API string // rule pattern; "" for an app total
	// head reports whether the rule lists HEAD among its methods: only
	// then does a HEAD request match it rather than GET's rules.
	head   bool
	Params limit.Params
	// Local are the params of --fail-mode local: Params with Limit (and
	// Burst) scaled by the local share, decided in memory when the shared
	// store fails.
	Local  limit.Params
	Shadow bool
	// Alerts are the rule's alert thresholds, percentages of its limit
	// (docs/plans-and-tokens.md, "Budget alerts"); nil for none.
	Alerts []int
	// Key is the counter key; for a by other than app or global a
	// suffix is appended after a "|" (the client address group, or the
	// values of AttrKey), and callers past the store's key cap share
	// Overflow.
	Key, Overflow string
	// Kind, Parts and Missing say how the counter key of a request is
	// built: Parts are those of By, Missing what a missing header or
	// query value does.
	Kind    KeyKind
	By      config.By
	Parts   []config.KeyPart
	Missing config.Missing
	// Claims reports whether By names a claim of the caller's token.
	Claims bool
	// Conc is the most requests in flight per key, 0 for no cap;
	// ConcLocal the same scaled by the local share (--fail-mode local).
	Conc, ConcLocal int64
	// Policy is the RateLimit-Policy item for this limit.
	Policy string
	// Name is the quoted policy name used in the RateLimit header.
	Name string
	// The header values and the limited body that never change, built
	// once here rather than per request.
	PolicyHdr  []string // RateLimit-Policy of this limit alone
	PairPolicy []string // RateLimit-Policy of the section's total and this rule
	LimitHdr   []string // X-RateLimit-Limit
	Body429    []byte   // the limited body up to retryAfterSeconds' value
	// BodyBlocked is the whole body of a limit of 0; nil for others.
	BodyBlocked []byte
	// Cost and Count are what a request costs and which responses count
	// (docs/rules.md, "Request cost").
	Cost  config.Cost
	Count *config.Count
	// Plan is the plan the rule comes from, "" for an app's own rule.
	Plan string
	// MaxDelay is how long a request over the limit may wait for room
	// (docs/plans-and-tokens.md, "Waiting for room instead of 429"); 0
	// refuses at once.
	MaxDelay time.Duration
	// MaxBody is the most bytes of a request's body read for a key part
	// naming a body field; 0 when By names none.
	MaxBody int
	// Refusal is how the limit's refusals are written (its rule's and
	// plan's errorFormat and retryAfterMax).
	Refusal config.Refusal
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

// Compile builds a Set from parsed rules with the default options.
func Compile(rules *config.Rules, now time.Time) (*Set, error) {
	return CompileWith(rules, now, CompileOptions{})
}

// CompileWith builds a Set from parsed rules. A reload compiles the new
// rules with the options of the rule set in force.
func CompileWith(rules *config.Rules, now time.Time, opts CompileOptions) (*Set, error) {
	if opts.LocalShare == 0 {
		opts.LocalShare = DefaultLocalShare
	}
	if !(opts.LocalShare > 0 && opts.LocalShare <= 1) {
		return nil, fmt.Errorf("local share %v is outside (0, 1]", opts.LocalShare)
	}
	rs := &Set{Source: rules, LoadedAt: now, apps: make(map[string]*Section, len(rules.Apps)), keys: map[string]time.Duration{}}
	for i := range rules.Apps {
		app := &rules.Apps[i]
		sec := &Section{
			App:   app.ID,
			IPTag: app.By == config.ByIP,
			By:    app.By,
			Keys:  app.Keys,
			trie:  trie.New[*Limit](trie.Options{CaseInsensitive: rules.CaseInsensitive}),
		}
		if opts.NoJWT && app.Total != nil && app.By.Claims() {
			return nil, noJWTError(rules.Path, app.Line, "app "+app.ID+"'s total", app.By)
		}
		if app.Total != nil && app.Total.Limit != limit.Unlimited {
			sec.Total = newCompiledLimit(app.ID, "", nil, *app.Total, false, opts)
			sec.Total.Cost, sec.Total.Count, sec.Total.Alerts = app.TotalCost, app.TotalCount, app.TotalAlerts
			sec.Total.keyBy(app.By, app.Missing)
			if app.TotalCost.Estimate || app.TotalCost.Price != nil {
				sec.Total.MaxBody = config.DefaultMaxBody
			}
			rs.keys[sec.Total.Key] = sec.Total.Params.Window
			sec.all = append(sec.all, sec.Total)
		}
		if app.Concurrency > 0 {
			if opts.NoJWT && app.By.Claims() {
				return nil, noJWTError(rules.Path, app.Line, "app "+app.ID+"'s concurrency", app.By)
			}
			sec.Conc = appConcurrency(sec.Total, app, opts)
		}
		for j := range app.Limits {
			r := &app.Limits[j]
			if by := cmp.Or(r.By, app.By); opts.NoJWT && by.Claims() {
				return nil, noJWTError(rules.Path, r.Line, "rule "+r.API, by)
			}
			cl := newCompiledLimit(app.ID, r.API, r.Methods, r.Params, r.Shadow, opts)
			cl.Cost, cl.Count, cl.Plan, cl.MaxDelay, cl.Refusal, cl.Alerts = r.Cost, r.Count, r.Plan, r.MaxDelay, r.Refusal, r.Alerts
			cl.keyBy(cmp.Or(r.By, app.By), cmp.Or(r.Missing, app.Missing))
			if r.MaxBody > 0 {
				cl.MaxBody = r.MaxBody
			} else if r.Cost.Estimate || r.Cost.Price != nil {
				cl.MaxBody = config.DefaultMaxBody // read for the estimate, or the model
			}
			sec.IPTag = sec.IPTag && cl.Kind == KeyIP
			cl.head = slices.Contains(r.Methods, http.MethodHead)
			cl.setConcurrency(r.Concurrency, opts)
			rs.keys[cl.Key] = cl.Params.Window
			if t := sec.Total; t != nil && !t.Shadow && !cl.Shadow {
				cl.PairPolicy = []string{t.Policy + ", " + cl.Policy}
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

func newCompiledLimit(app, api string, methods []string, p limit.Params, shadow bool, opts CompileOptions) *Limit {
	key := app + "|" + api
	if len(methods) > 0 {
		key += "|" + strings.Join(methods, ",")
	}
	name := app + api
	if len(methods) > 0 {
		name += " " + strings.Join(methods, ",")
	}
	quoted := ratelimitheader.Quote(name)
	cl := &Limit{
		App:      app,
		API:      api,
		Params:   p,
		Local:    p.Scaled(opts.LocalShare),
		Shadow:   shadow,
		Key:      key,
		Overflow: key + "|overflow",
		Name:     quoted,
		Policy:   string(ratelimitheader.AppendPolicy(nil, quoted, p.Limit, p.Window)),
		LimitHdr: []string{strconv.FormatInt(p.Limit, 10)},
	}
	cl.PolicyHdr = []string{cl.Policy}
	cl.Body429 = limitedBodyPrefix(app, api, p)
	if p.Limit == 0 {
		cl.BodyBlocked = blockedBody(app, api, p)
	}
	return cl
}

// addKeyHeaders adds the headers by is keyed on to rs.keyHeaders.
func (rs *Set) addKeyHeaders(by config.By) {
	for _, p := range by.Parts() {
		if p.Kind == config.KeyHeader && !slices.Contains(rs.keyHeaders, p.Name) {
			rs.keyHeaders = append(rs.keyHeaders, p.Name)
		}
	}
}

// keyBy sets how cl's counter keys are built: by by, with missing for
// a missing header or query value ("" means config.MissingIP).
func (cl *Limit) keyBy(by config.By, missing config.Missing) {
	cl.By, cl.Kind, cl.Parts, cl.Claims = by, kindOf(by), by.Parts(), by.Claims()
	cl.Missing = cmp.Or(missing, config.MissingIP)
	if by.Body() {
		cl.MaxBody = config.DefaultMaxBody
	}
}

// Keyed reports whether some app of rs has API keys.
func (rs *Set) Keyed() bool { return rs.keyed }

// KeyHeaders returns the headers some limit of rs is keyed on, canonical,
// each once: their underscore spellings are not forwarded. The caller
// must not modify the slice.
func (rs *Set) KeyHeaders() []string { return rs.keyHeaders }

// Sections returns the sections of rs's configured apps, in no order;
// not the "*" section of unknown callers.
func (rs *Set) Sections() iter.Seq[*Section] { return maps.Values(rs.apps) }

// LimitCount returns the number of limits in force: API rules plus app
// totals.
func (rs *Set) LimitCount() int { return len(rs.keys) }

// OwnsKey reports whether a store key belongs to one of rs's limits: a
// limit's own key, or that key plus "|" and a client address group (or
// "overflow").
func (rs *Set) OwnsKey(key string) bool {
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

// LargestMaxBody returns the most bytes of a request's body that a limit
// of rs reads (Limit.MaxBody), and that limit (of those that read as
// much, the first by app and API); 0 and nil when none reads a body.
func (rs *Set) LargestMaxBody() (int, *Limit) {
	var of *Limit
	look := func(sec *Section) {
		for _, cl := range sec.all {
			if of == nil || cl.MaxBody > of.MaxBody ||
				cl.MaxBody == of.MaxBody && (cl.App < of.App || cl.App == of.App && cl.API < of.API) {
				of = cl
			}
		}
	}
	for _, sec := range rs.apps {
		look(sec)
	}
	if rs.unknown != nil {
		look(rs.unknown)
	}
	if of == nil || of.MaxBody == 0 {
		return 0, nil
	}
	return of.MaxBody, of
}

// LimitKeys returns the counter key of every limit of rs, with the
// limit's window.
func (rs *Set) LimitKeys() map[string]time.Duration { return maps.Clone(rs.keys) }

// Match returns the most specific rule of the section for a request with
// this method (upper-case) and normalized path. A HEAD request is matched
// as GET, as the upstream serves it (net/http, Express, Flask, Django,
// Rails and Spring serve HEAD with the GET handler), unless a rule lists
// HEAD itself.
func (sec *Section) Match(method, path string) (*Limit, string, bool) {
	cl, pattern, ok := sec.trie.Match(method, path)
	if method == http.MethodHead && !(ok && cl.head) {
		return sec.trie.Match(http.MethodGet, path)
	}
	return cl, pattern, ok
}

// Lookup returns the section for a caller's app ID and whether the app is
// configured. Callers with no or an unconfigured app ID get the "*"
// section, which may be nil.
func (rs *Set) Lookup(app string) (*Section, bool) {
	if app != "" {
		if s, ok := rs.apps[app]; ok {
			return s, true
		}
	}
	return rs.unknown, false
}

// noJWTError is the error of a limit keyed on a claim when tokens are not
// verified.
func noJWTError(path string, line int, what string, by config.By) error {
	return fmt.Errorf("%s:%d: %s counts by %s, a claim of a verified JWT, but callers' tokens are not verified: set --jwt-jwks or --jwt-hmac-secret-file, or count by something else", path, line, what, by)
}

// Deferred reports whether cl counts a request only once its response is
// known.
func (cl *Limit) Deferred() bool {
	return cl.Cost.Header != "" || cl.Count != nil || cl.BodyCost()
}

// BodyCost reports whether cl's cost is read from the response body.
func (cl *Limit) BodyCost() bool { return len(cl.Cost.Body) > 0 }

// setConcurrency sets cl's in-flight cap, and its local share.
func (cl *Limit) setConcurrency(n int64, opts CompileOptions) {
	if n <= 0 {
		return
	}
	cl.Conc = n
	cl.ConcLocal = min(max(int64(math.Ceil(float64(n)*opts.LocalShare-1e-9)), 1), n)
}

// appConcurrency returns the limit of an app's concurrency: its total's,
// when it has one, so that both count by the same key.
func appConcurrency(total *Limit, app *config.App, opts CompileOptions) *Limit {
	cl := total
	if cl == nil {
		cl = newCompiledLimit(app.ID, "", nil, limit.Params{Limit: limit.Unlimited}, false, opts)
		cl.keyBy(app.By, app.Missing)
	}
	cl.setConcurrency(app.Concurrency, opts)
	return cl
}
