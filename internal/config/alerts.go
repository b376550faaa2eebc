package config

import (
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file reads a limit's budget alerts: alerts: [80, 100], the
// percentages of the limit whose crossing is told once per caller per
// window (docs/plans-and-tokens.md, "Budget alerts"). A plan's alerts
// apply to its rules that set none.

// alertsNeeds says what alerts must be, for messages.
const alertsNeeds = `a list of percentages of the limit, like [80, 100] or ["80%", "100%"]`

// alerts reads an alerts field: percentages 1..100, returned ascending
// and without repeats.
func (p *parser) alerts(f field) ([]int, bool) {
	items, isList := oneOrList(f)
	if !isList || len(items) == 0 {
		p.errorf(f.line, "alerts must be %s, not %s", alertsNeeds, p.describe(f.val))
		return nil, false
	}
	var out []int
	ok := true
	for _, it := range items {
		if it.node.Kind != yaml.ScalarNode {
			p.errorf(it.line, "alerts must be %s, not %s", alertsNeeds, p.describe(it.node))
			ok = false
			continue
		}
		// XML writes a list as one attribute: alerts="80 100" or "80,100".
		for _, s := range strings.FieldsFunc(it.node.Value, func(r rune) bool { return r == ',' || r == ' ' }) {
			v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "%"))
			if err != nil || v < 1 || v > 100 {
				p.errorf(it.line, "alert %q is not a whole percentage of the limit from 1 to 100, like 80", s)
				ok = false
				continue
			}
			out = append(out, v)
		}
	}
	if !ok {
		return nil, false
	}
	if len(out) == 0 {
		p.errorf(f.line, "alerts is empty; list the percentages of the limit to be told of, like [80, 100]")
		return nil, false
	}
	slices.Sort(out)
	return slices.Compact(out), true
}
