package config

import (
	"errors"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// This file reads plans: named sets of limits that app sections take with
// plan: NAME (docs/plans-and-tokens.md). A plan is expanded into each app
// that takes it when the file is parsed, so that the proxy, match, /rules
// and replay see an app's limits as they apply, and each app keeps its own
// counters: a plan's rule counts per app, under the same key as the rule
// written in the app would, so that moving a rule into a plan, or changing
// a plan, keeps the counters as any reload does.

var planFields = []string{"name", "limits", "errorFormat", "retryAfterMax", "alerts"}

// A plan is one entry of the plans list.
type plan struct {
	name  string
	rules []Rule
	line  int
}

// readPlans reads the plans field f: a list of {name, limits}.
func (p *parser) readPlans(f field) {
	p.plans = map[string]*plan{}
	if f.val.Kind != yaml.SequenceNode {
		p.wrongType(f, p.word("a list", "an array")+" of plans, each with a name and its limits")
		return
	}
	for _, item := range f.val.Content {
		n := deref(item)
		if n.Kind != yaml.MappingNode {
			p.errorf(item.Line, "each entry of plans must be %s with a name and its limits, not %s", p.word("a mapping", "an object"), p.describe(n))
			continue
		}
		fs := p.fields(n, "this plan", planFields)
		pl := &plan{line: item.Line}
		nf, hasName := fs["name"]
		if !hasName {
			p.errorf(item.Line, "this plan has no name; set name, which app sections name in plan: NAME")
		} else if name, ok := p.str(nf); ok {
			switch first, dup := p.plans[name]; {
			case !ValidAppID(name):
				p.errorf(nf.line, "plan name %q is not valid; use 1 to %d of the characters A-Z a-z 0-9 . _ : -", name, MaxAppIDLen)
			case dup:
				p.errorf(nf.line, "plan %q is already defined at line %d; give each plan its own name", name, first.line)
			default:
				pl.name = name
			}
		}
		lf, hasLimits := fs["limits"]
		if !hasLimits {
			p.errorf(item.Line, "this plan has no limits; list the rules (api and limit) every app on the plan gets")
		} else {
			pl.rules = p.limits(lf)
		}
		if rf, good := p.refusal(fs); good {
			for i := range pl.rules {
				pl.rules[i].Refusal = pl.rules[i].Refusal.Or(rf)
			}
		}
		if af, has := fs["alerts"]; has {
			if al, good := p.alerts(af); good {
				for i := range pl.rules {
					if pl.rules[i].Alerts == nil {
						pl.rules[i].Alerts = al
					}
				}
			}
		}
		if pl.name != "" {
			p.plans[pl.name] = pl
		}
	}
}

// appPlan returns the plan an app's plan field f names, nil when it names
// none that is defined (reported).
func (p *parser) appPlan(f field) *plan {
	name, ok := p.str(f)
	if !ok {
		return nil
	}
	if pl, ok := p.plans[name]; ok {
		return pl
	}
	if len(p.plans) == 0 {
		p.errorf(f.line, "plan %q is not defined: the rule file has no plans; add a plans list with an entry of name %q and its limits", name, name)
		return nil
	}
	names := make([]string, 0, len(p.plans))
	for n := range p.plans {
		names = append(names, n)
	}
	slices.Sort(names)
	p.errorf(f.line, "plan %q is not defined; use one of: %s", name, strings.Join(names, ", "))
	return nil
}

// withPlan returns an app's own rules followed by those of pl that none
// of them overrides: an app's rule overrides the plan's rule with the
// same api and methods. A plan rule that limits some of the same requests
// as an app's rule without being overridden by it is reported on line,
// the app's plan field.
func (p *parser) withPlan(own []Rule, pl *plan, line int) []Rule {
	out := slices.Clip(slices.Clone(own))
	seen := trie.New[int](trie.Options{CaseInsensitive: p.caseInsensitive})
	for _, r := range own {
		if r.API != "" {
			_ = seen.Insert(r.API, r.Methods, r.Line)
		}
	}
	for _, r := range pl.rules {
		if slices.ContainsFunc(own, func(o Rule) bool { return sameRule(o, r, p.caseInsensitive) }) {
			continue // overridden
		}
		var dup *trie.DuplicateError[int]
		if err := seen.Insert(r.API, r.Methods, r.Line); errors.As(err, &dup) {
			p.errorf(line, "plan %q's rule %s at line %d limits some of the same requests as this app's rule at line %d; to override it, give the app's rule the same api and method as the plan's",
				pl.name, r.API, r.Line, dup.Value)
			continue
		} else if err != nil {
			p.errorf(line, "plan %q's rule at line %d: %s", pl.name, r.Line, err)
			continue
		}
		r.Plan = pl.name
		out = append(out, r)
	}
	return out
}

// sameRule reports whether a and b limit the same api for the same
// methods; ci reports whether paths match regardless of ASCII case.
func sameRule(a, b Rule, ci bool) bool {
	if a.API == "" || !slices.Equal(a.Methods, b.Methods) {
		return false
	}
	return a.API == b.API || ci && strings.EqualFold(a.API, b.API)
}
