package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// The fields of each part of the rule file, in the order messages list
// them.
var (
	topFields      = []string{"caseSensitive", "caseInsensitive", "defaults", "plans", "configs", "upstreams", "routes"}
	settingFields  = []string{"algorithm", "unit", "precision", "burst", "warmup", "lockSeconds", "timezone"}
	defaultsFields = append(slices.Clone(settingFields), "by", "missing")
	appFields      = []string{"appId", "by", "missing", "limit", "unit", "algorithm", "precision", "burst", "limits", "keys", "warmup", "lockSeconds", "timezone", "concurrency", "cost", "count", "plan", "alerts"}
	ruleFields     = []string{"api", "method", "by", "missing", "limit", "unit", "algorithm", "precision", "burst", "shadow", "warmup", "lockSeconds", "timezone", "concurrency", "cost", "count", "maxDelay", "errorFormat", "retryAfterMax", "maxBody", "alerts"}
)

// maxLockSeconds is the longest lockSeconds that a time.Duration holds;
// limit.Params.Validate bounds it further.
const maxLockSeconds = maxUnitSeconds

// MaxAppIDLen is the longest app ID (docs/rules.md, "How a request is
// handled").
const MaxAppIDLen = 128

const noConfigs = "the rule file has no configs; add a configs list with one entry per app (appId and its limits), " +
	"or an entry with appId \"*\" for callers without an app ID"

// rules builds the Rules of the file whose top-level node is root (nil
// for an empty file).
func (p *parser) rules(root *yaml.Node) *Rules {
	r := &Rules{}
	p.defaults = builtinSettings()
	if root == nil {
		p.errorf(0, noConfigs)
		return r
	}
	root = deref(root)
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		p.errorf(root.Line, noConfigs)
		return r
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "the rule file must be %s with a configs list, not %s", p.word("a mapping", "an object"), p.describe(root))
		return r
	}
	fs := p.fields(root, "the top level", topFields)
	// Paths match case-insensitively unless the file says otherwise: an
	// upstream that ignores case (Express, ASP.NET Core) would serve
	// /V1/ADMIN past a rule on /v1/admin. caseInsensitive, its old name
	// with the opposite sense, is still read.
	r.CaseInsensitive = true
	cs, hasCS := fs["caseSensitive"]
	ci, hasCI := fs["caseInsensitive"]
	if hasCS {
		sensitive, _ := p.boolean(cs)
		r.CaseInsensitive = !sensitive
	}
	if hasCI {
		insensitive, ok := p.boolean(ci)
		switch {
		case ok && hasCS && insensitive == r.CaseInsensitive:
			// The same setting twice; nothing to say.
		case ok && hasCS:
			p.errorf(ci.line, "caseInsensitive: %v contradicts caseSensitive: %v on line %d; keep caseSensitive only", insensitive, !r.CaseInsensitive, cs.line)
		case ok:
			r.CaseInsensitive = insensitive
		}
	}
	p.caseInsensitive = r.CaseInsensitive
	if f, ok := fs["defaults"]; ok {
		if f.val.Kind != yaml.MappingNode {
			// The settings every algorithm has first, then the others.
			p.errorf(f.line, "defaults must be %s of %s, not %s; it may also set %s",
				p.word("a mapping", "an object"), strings.Join(defaultsFields[:4], ", "), p.describe(f.val), strings.Join(defaultsFields[4:], ", "))
		} else {
			dfs := p.fields(f.val, "defaults", defaultsFields)
			p.defaults, _ = p.readSettings(dfs, p.defaults)
			p.checkDefaultsCalendar(&p.defaults)
			if f, ok := dfs["by"]; ok {
				p.defaultBy, _ = p.by(f)
			}
			if f, ok := dfs["missing"]; ok {
				p.defaultMissing, _ = p.missing(f)
			}
		}
	}
	if f, ok := fs["plans"]; ok {
		p.readPlans(f)
	}
	p.upstreamNames = map[string]bool{}
	if f, ok := fs["upstreams"]; ok {
		r.Upstreams = p.upstreams(f)
	}
	if f, ok := fs["routes"]; ok {
		r.Routes = p.routes(f, r.Upstreams)
	}
	f, ok := fs["configs"]
	switch {
	case !ok:
		p.errorf(0, noConfigs)
		return r
	case f.val.Kind != yaml.SequenceNode:
		p.wrongType(f, p.word("a list", "an array")+" of app sections")
		return r
	case len(f.val.Content) == 0:
		p.errorf(f.line, noConfigs)
		return r
	}
	ids := map[string]int{}
	for _, item := range f.val.Content {
		if app, ok := p.app(item, ids); ok {
			r.Apps = append(r.Apps, app)
		}
	}
	return r
}

// concurrency returns the value of a concurrency field: the most requests
// in flight, 1..limit.MaxConcurrency.
func (p *parser) concurrency(f field) (int64, bool) {
	v, ok := p.integer(f)
	switch {
	case !ok:
		return 0, false
	case v < 1 || v > limit.MaxConcurrency:
		p.errorf(f.line, "concurrency %d is outside 1..%d; it is the most requests in flight at once (remove it for no cap, or set limit: 0 to block every request)", v, limit.MaxConcurrency)
		return 0, false
	}
	return v, true
}

// limitValue returns the value of a limit field.
func (p *parser) limitValue(f field) (int64, bool) {
	v, ok := p.integer(f)
	switch {
	case !ok:
		return 0, false
	case v < limit.Unlimited:
		p.errorf(f.line, "limit %d is below -1; use -1 for unlimited or 0 to block every request", v)
		return 0, false
	case v > limit.MaxLimit:
		p.errorf(f.line, "limit %d is above the maximum %d", v, int64(limit.MaxLimit))
		return 0, false
	}
	return v, true
}

// app builds the app section item of configs. ids maps the app IDs seen so
// far to their lines. It reports false when the item is not a mapping.
func (p *parser) app(item *yaml.Node, ids map[string]int) (App, bool) {
	n := deref(item)
	app := App{Line: item.Line}
	if n.Kind != yaml.MappingNode {
		p.errorf(item.Line, "each entry of configs must be %s with an appId and its limits, not %s", p.word("a mapping", "an object"), p.describe(n))
		return app, false
	}
	fs := p.fields(n, "this app section", appFields)

	if f, ok := fs["appId"]; !ok {
		p.errorf(app.Line, "this app section has no appId; set appId to the caller's app ID, or to \"*\" for callers without one")
	} else if id, ok := p.str(f); ok {
		line := f.line
		if item.Kind == yaml.AliasNode {
			line = item.Line // a section repeated with *alias
		}
		switch first, dup := ids[id]; {
		case id != UnknownApp && !ValidAppID(id):
			p.errorf(f.line, "appId %q is not valid; use \"*\" or 1 to %d of the characters A-Z a-z 0-9 . _ : -", id, MaxAppIDLen)
		case dup:
			p.errorf(line, "appId %q is already configured at line %d; merge the two sections into one", id, first)
		default:
			ids[id] = line
			app.ID = id
		}
	}

	// defaults' by is for configured apps: the "*" section stays per
	// client address unless it says otherwise, so that a by naming a
	// header does not let unknown callers pick their own counters.
	app.By = ByApp
	if app.ID == UnknownApp {
		app.By = ByIP
	} else if p.defaultBy != "" {
		app.By = p.defaultBy
	}
	if f, ok := fs["by"]; ok {
		if by, ok := p.by(f); ok {
			app.By = by
		}
	}
	app.Missing = p.defaultMissing
	if f, ok := fs["missing"]; ok {
		app.Missing, _ = p.missing(f)
	}

	if f, ok := fs["keys"]; ok {
		if app.ID == UnknownApp {
			p.errorf(f.line, "keys cannot be set on the \"*\" section: it is for callers without a configured app ID; give the callers an appId with keys instead")
		} else {
			app.Keys = p.keys(f)
		}
	}

	s, settingsOK := p.readSettings(fs, p.defaults)
	total, hasTotal := fs["limit"]
	if hasTotal {
		if v, ok := p.limitValue(total); ok && settingsOK && v != limit.Unlimited {
			params := s.params(v)
			if p.validate(&params, &s, total.line, app.Line, "the app's total limit: ") {
				if c, n, ok := p.costAndCount(fs, &params); ok {
					app.Total, app.TotalCost, app.TotalCount = &params, c, n
				}
				if f, has := fs["alerts"]; has {
					app.TotalAlerts, _ = p.alerts(f)
				}
			}
		}
	} else {
		// The settings of an app apply to its total only; without a
		// total they would be silently ignored, though they look like
		// they set the unit of every rule below.
		for _, name := range slices.Concat(settingFields, []string{"cost", "count", "alerts"}) {
			if f, ok := fs[name]; ok {
				p.errorf(f.line, "%s on an app section applies to the app's total limit, but the section has no limit; set limit here, or move %s to each rule or to defaults", name, name)
			}
		}
	}

	f, hasLimits := fs["limits"]
	if hasLimits {
		app.Limits = p.limits(f)
	}
	pf, hasPlan := fs["plan"]
	if hasPlan {
		if pl := p.appPlan(pf); pl != nil {
			app.Plan = pl.name
			app.Limits = p.withPlan(app.Limits, pl, pf.line)
		}
	}
	conc, hasConc := fs["concurrency"]
	if hasConc {
		app.Concurrency, _ = p.concurrency(conc)
	}
	if !hasTotal && !hasLimits && !hasConc && !hasPlan {
		p.errorf(app.Line, "this app section has neither limit nor limits, so it would do nothing; add limits, or set limit: -1 to exempt the app from the \"*\" section explicitly")
	}
	return app, true
}

// keys returns the API key digests of an app's keys list: each the sha256
// of a key as 64 hex digits.
func (p *parser) keys(f field) [][sha256.Size]byte {
	const how = "the sha256 of a key as 64 hex digits (for example: printf %s \"$KEY\" | sha256sum)"
	if f.val.Kind != yaml.SequenceNode {
		// Not wrongType: it would quote the value, which may be a key.
		p.errorf(f.line, "keys must be a list of key digests, each %s, not a single value", how)
		return nil
	}
	if len(f.val.Content) == 0 {
		p.errorf(f.line, "keys is an empty list, which would admit no caller; remove keys to identify the app by its header alone, or list the digests of its keys")
		return nil
	}
	var keys [][sha256.Size]byte
	seen := map[[sha256.Size]byte]int{}
	for _, c := range f.val.Content {
		n := deref(c)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			// The value is not quoted: it may be a key pasted in clear.
			p.errorf(c.Line, "each key must be %s, not %s", how, p.kind(n))
			continue
		}
		var d [sha256.Size]byte
		if len(n.Value) != 2*sha256.Size {
			p.errorf(c.Line, "this key is not a sha256 digest: it has %d characters, not 64; each key must be %s, never the key itself", len(n.Value), how)
			continue
		}
		if _, err := hex.Decode(d[:], []byte(n.Value)); err != nil {
			p.errorf(c.Line, "this key is not a sha256 digest: it is not hexadecimal; each key must be %s", how)
			continue
		}
		if first, dup := seen[d]; dup {
			p.errorf(c.Line, "this key digest is already listed at line %d; list it once", first)
			continue
		}
		seen[d] = c.Line
		keys = append(keys, d)
	}
	return keys
}

// ValidAppID reports whether id is an app ID a caller can send: 1 to
// MaxAppIDLen bytes of [A-Za-z0-9._:-]. The gateway checks request headers
// and rule files with it.
func ValidAppID(id string) bool {
	if id == "" || len(id) > MaxAppIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// A listResult is what limits built from one list node.
type listResult struct {
	rules []Rule
}

// limits builds the rules of an app's limits list.
func (p *parser) limits(f field) []Rule {
	n := f.val
	if n.Kind != yaml.SequenceNode {
		p.wrongType(f, p.word("a list", "an array")+" of rules")
		return nil
	}
	if res, ok := p.listMemo[n]; ok {
		return res.rules
	}
	res := &listResult{}
	p.listMemo[n] = res
	// The rules so far, by line: the trie the proxy builds from them
	// refuses a duplicate, and says which rule it duplicates.
	seen := trie.New[int](trie.Options{CaseInsensitive: p.caseInsensitive})
	for _, item := range n.Content {
		r := p.rule(item)
		p.checkDuplicate(seen, r, item.Line)
		if r.ok {
			res.rules = append(res.rules, r.rule)
		}
	}
	return res.rules
}

// A ruleResult is what rule built from one node.
type ruleResult struct {
	// rule is the rule; its API is "" when the api is not valid.
	rule Rule
	// ok reports whether the rule is valid; its problems have been
	// reported when not.
	ok bool
}

// checkDuplicate reports r, at line, if a rule in seen (an app's rules so
// far, by line) already limits the same paths for one of the same
// methods, and adds it to seen otherwise.
func (p *parser) checkDuplicate(seen *trie.Trie[int], r *ruleResult, line int) {
	api, methods := r.rule.API, r.rule.Methods
	if api == "" {
		return // the api was not valid, already reported
	}
	var dup *trie.DuplicateError[int]
	if !errors.As(seen.Insert(api, methods, line), &dup) {
		return // added; api and methods were checked when they were read
	}
	same := ""
	if dup.Existing != api {
		same = fmt.Sprintf(" (%s matches the same paths)", dup.Existing)
	}
	if dup.Method == "" {
		p.errorf(line, "api %s is already limited by the rule at line %d%s; merge the two rules into one", api, dup.Value, same)
	} else {
		p.errorf(line, "api %s with method %s is already limited by the rule at line %d%s; remove %s from one of them", api, dup.Method, dup.Value, same, dup.Method)
	}
}

// rule builds one rule from an item of a limits list.
func (p *parser) rule(item *yaml.Node) *ruleResult {
	n := deref(item)
	if res, ok := p.ruleMemo[n]; ok {
		return res
	}
	res := p.buildRule(n)
	p.ruleMemo[n] = res
	return res
}

func (p *parser) buildRule(n *yaml.Node) *ruleResult {
	res := &ruleResult{rule: Rule{Line: n.Line}}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "each entry of limits must be %s with api and limit, not %s", p.word("a mapping", "an object"), p.describe(n))
		return res
	}
	fs := p.fields(n, "this rule", ruleFields)
	ok := true

	if f, has := fs["api"]; !has {
		p.errorf(n.Line, "this rule has no api; set api to the path it limits, like /v1/user")
		ok = false
	} else if api, good := p.str(f); !good {
		ok = false
	} else if canonical, _, err := trie.ParsePattern(api); err != nil {
		p.errorf(f.line, "%s", err)
		ok = false
	} else {
		res.rule.API = canonical
	}

	if f, has := fs["method"]; has {
		if methods, good := p.methods(f); good {
			res.rule.Methods = methods
		} else {
			ok = false
		}
	}

	if f, has := fs["shadow"]; has {
		if v, good := p.boolean(f); good {
			res.rule.Shadow = v
		} else {
			ok = false
		}
	}

	if f, has := fs["maxDelay"]; has {
		if d, good := p.maxDelay(f, res.rule.Shadow); good {
			res.rule.MaxDelay = d
		} else {
			ok = false
		}
	}

	if rf, good := p.refusal(fs); good {
		res.rule.Refusal = rf
	} else {
		ok = false
	}

	if f, has := fs["alerts"]; has {
		if v, good := p.alerts(f); good {
			res.rule.Alerts = v
		} else {
			ok = false
		}
	}

	if f, has := fs["by"]; has {
		if v, good := p.by(f); good {
			res.rule.By = v
		} else {
			ok = false
		}
	}
	if f, has := fs["missing"]; has {
		if v, good := p.missing(f); good {
			res.rule.Missing = v
		} else {
			ok = false
		}
	}
	if f, has := fs["maxBody"]; has {
		if v, good := p.maxBody(f, res.rule.By); good {
			res.rule.MaxBody = v
		} else {
			ok = false
		}
	}

	s, settingsOK := p.readSettings(fs, p.defaults)
	ok = ok && settingsOK
	f, has := fs["limit"]
	if cf, hasConc := fs["concurrency"]; hasConc {
		c, good := p.concurrency(cf)
		if good && res.rule.Shadow {
			p.errorf(cf.line, "concurrency cannot be set on a shadow rule: a shadow rule never refuses; remove shadow or concurrency")
			good = false
		}
		ok = ok && good
		res.rule.Concurrency = c
		if !has {
			// Only an in-flight cap: the settings of a rate would do
			// nothing.
			for _, name := range settingFields {
				if sf, set := fs[name]; set {
					p.errorf(sf.line, "%s applies to a rule's limit, but this rule sets only concurrency; set limit too, or remove %s", name, name)
					ok = false
				}
			}
			res.rule.Params = s.params(limit.Unlimited)
			res.ok = ok
			return res
		}
	}
	if !has {
		p.errorf(n.Line, "this rule has no limit; set limit to the number of requests allowed per unit (-1 for unlimited, 0 to block every request), or concurrency to cap the requests in flight")
		return res
	}
	v, good := p.limitValue(f)
	if !good || !ok {
		return res
	}
	res.rule.Params = s.params(v)
	res.ok = p.validate(&res.rule.Params, &s, f.line, n.Line, "")
	if res.ok {
		res.rule.Cost, res.rule.Count, res.ok = p.costAndCount(fs, &res.rule.Params)
	}
	return res
}

// methods returns the methods of a method field, a string or a list of
// them, upper-cased and sorted.
// listItem is one value of a setting that takes a value or a list of
// them, with its line.
type listItem struct {
	node *yaml.Node
	line int
}

// oneOrList returns the values of f: itself when it is a scalar, its
// items (aliases followed) when it is a sequence, which may be empty. ok
// is false when f is neither.
func oneOrList(f field) (items []listItem, ok bool) {
	switch f.val.Kind {
	case yaml.ScalarNode:
		return []listItem{{f.val, f.line}}, true
	case yaml.SequenceNode:
		items = make([]listItem, 0, len(f.val.Content))
		for _, c := range f.val.Content {
			items = append(items, listItem{deref(c), c.Line})
		}
		return items, true
	}
	return nil, false
}

func (p *parser) methods(f field) ([]string, bool) {
	items, isList := oneOrList(f)
	switch {
	case !isList:
		p.wrongType(f, "a method or a list of methods")
		return nil, false
	case len(items) == 0:
		p.errorf(f.line, "method is an empty list; remove method to limit every method, or list the methods to limit")
		return nil, false
	}
	ok := true
	var methods []string
	for _, it := range items {
		if it.node.Kind != yaml.ScalarNode || it.node.ShortTag() != "!!str" {
			p.errorf(it.line, "method must be an HTTP method like GET or a list of them, not %s", p.describe(it.node))
			ok = false
			continue
		}
		m, err := trie.ParseMethod(it.node.Value)
		switch {
		case err != nil:
			p.errorf(it.line, "%s", err)
			ok = false
		case slices.Contains(methods, m):
			p.errorf(it.line, "method %s is listed twice; list it once", m)
			ok = false
		default:
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	return methods, ok
}
