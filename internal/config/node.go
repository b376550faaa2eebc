package config

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parser walks the node tree of one rule file and collects every problem
// it finds. It is used once.
type parser struct {
	file string
	// json reports whether the file is JSON, for the words used in
	// messages ("object" rather than "mapping").
	json bool
	// xml reports whether the file is XML, whose values are never
	// quoted.
	xml  bool
	errs Errors
	// caseInsensitive is the file's caseInsensitive setting, read before
	// any rule.
	caseInsensitive bool
	// defaults are the built-in settings overridden by the defaults
	// section.
	defaults settings
	// defaultBy and defaultMissing are those of the defaults section,
	// "" when it sets none.
	defaultBy      By
	defaultMissing Missing
	// ruleMemo and listMemo hold what was built from a node, so that a
	// YAML alias that repeats a rule or a list of rules costs one walk
	// rather than one per use: a file of a few kilobytes of aliases could
	// otherwise expand to millions of rules.
	ruleMemo map[*yaml.Node]*ruleResult
	listMemo map[*yaml.Node]*listResult
	// plans are the plans by name, read before the app sections.
	plans map[string]*plan
	// merging is the chain of mappings whose << merge keys are being
	// resolved, to catch a mapping that merges itself.
	merging []*yaml.Node
	// upstreamNames are the names of the upstreams defined, valid or
	// not, so that a route naming one that has problems is not also
	// reported.
	upstreamNames map[string]bool
}

func newParser(file string) *parser {
	return &parser{
		file:     file,
		ruleMemo: map[*yaml.Node]*ruleResult{},
		listMemo: map[*yaml.Node]*listResult{},
	}
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// A field is one key of a mapping and its value.
type field struct {
	name string
	// line is the line of the key.
	line int
	// val is the value, with aliases followed.
	val *yaml.Node
}

// fields returns the fields of the mapping n by name, with YAML merge
// keys (<<: *anchor) resolved. It reports duplicate keys and keys not in
// allowed; what names the mapping in messages ("this rule").
func (p *parser) fields(n *yaml.Node, what string, allowed []string) map[string]field {
	out := map[string]field{}
	p.collect(n, what, allowed, out, map[*yaml.Node]bool{})
	return out
}

// collect adds the fields of n to out that out does not hold yet: keys of
// the mapping itself win over merged ones, and among merged mappings the
// earlier wins, as the YAML merge key specifies. done holds the mappings
// already collected into out: collecting one again would add nothing, and
// skipping it keeps a chain of repeated merges from taking exponential
// time.
func (p *parser) collect(n *yaml.Node, what string, allowed []string, out map[string]field, done map[*yaml.Node]bool) {
	if done[n] {
		return
	}
	done[n] = true
	p.merging = append(p.merging, n)
	defer func() { p.merging = p.merging[:len(p.merging)-1] }()

	var merges []*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, "a key in %s is %s; keys must be plain field names", what, p.describe(k))
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			p.errorf(k.Line, "%q is set twice in %s (first at line %d); remove one of them", name, what, first)
			continue
		}
		seen[name] = k.Line
		if !slices.Contains(allowed, name) {
			p.errorf(k.Line, "%s", unknownField(name, what, allowed))
			continue
		}
		if _, ok := out[name]; !ok {
			out[name] = field{name: name, line: k.Line, val: deref(v)}
		}
	}
	for _, m := range merges {
		src := deref(m)
		var srcs []*yaml.Node
		switch src.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{src}
		case yaml.SequenceNode:
			for _, s := range src.Content {
				srcs = append(srcs, deref(s))
			}
		}
		if len(srcs) == 0 {
			p.errorf(m.Line, "the merge key << in %s must name a mapping (<<: *anchor) or a list of them", what)
			continue
		}
		for _, s := range srcs {
			if s.Kind != yaml.MappingNode {
				p.errorf(m.Line, "the merge key << in %s must name a mapping (<<: *anchor) or a list of them, not %s", what, p.describe(s))
				continue
			}
			if slices.Contains(p.merging, s) {
				p.errorf(m.Line, "the merge key << in %s merges a mapping that contains it; remove the merge key", what)
				continue
			}
			p.collect(s, what, allowed, out, done)
		}
	}
}

// unknownField says that name is not a field of what, suggesting the
// field that was probably meant.
func unknownField(name, what string, allowed []string) string {
	msg := fmt.Sprintf("unknown field %q in %s", name, what)
	best, bestDist := "", 3
	for _, a := range allowed {
		d := editDistance(strings.ToLower(name), strings.ToLower(a))
		if d < bestDist && d < len(a) {
			best, bestDist = a, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return msg + "; the allowed fields are " + strings.Join(allowed, ", ")
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kind is describe without the value: for values that may be secrets.
func (p *parser) kind(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return p.describe(n)
	}
	switch n.ShortTag() {
	case "!!null":
		return "empty (null)"
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	}
	return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
}

// describe names the kind and value of n for a message: "the string
// "abc"", "the number 5", "a list".
func (p *parser) describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return p.word("a mapping", "an object")
	case yaml.SequenceNode:
		return p.word("a list", "an array")
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:37] + "..."
		}
		switch n.ShortTag() {
		case "!!null":
			return "empty (null)"
		case "!!str":
			return fmt.Sprintf("the string %q", v)
		case "!!int", "!!float":
			return "the number " + v
		case "!!bool":
			return v
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), v)
	}
	return "a value of unknown kind"
}

// word returns the YAML or the JSON name of something.
func (p *parser) word(yamlWord, jsonWord string) string {
	if p.json {
		return jsonWord
	}
	return yamlWord
}

// wrongType reports that f is not what it must be.
func (p *parser) wrongType(f field, want string) {
	hint := ""
	if want == "a string" && !p.json && !p.xml && f.val.Kind == yaml.ScalarNode && f.val.ShortTag() != "!!null" {
		hint = "; put the value in quotes"
	}
	p.errorf(f.line, "%s must be %s, not %s%s", f.name, want, p.describe(f.val), hint)
}

// str returns the value of f, which must be a string.
func (p *parser) str(f field) (string, bool) {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!str" {
		return f.val.Value, true
	}
	p.wrongType(f, "a string")
	return "", false
}

// boolean returns the value of f, which must be true or false.
func (p *parser) boolean(f field) (bool, bool) {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!bool" {
		var b bool
		if err := f.val.Decode(&b); err == nil {
			return b, true
		}
	}
	p.wrongType(f, "true or false")
	return false, false
}

// numKind classifies a numeric scalar.
type numKind int

const (
	notNumber numKind = iota
	wholeNumber
	fraction   // a number with a fractional part, or NaN
	outOfRange // a whole number beyond int64
)

// number reads a numeric scalar: a whole number as i, anything else as f.
// The number syntax is YAML's (1_000, 0x10, 1e3), or JSON's.
func number(n *yaml.Node) (i int64, f float64, kind numKind) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, 0, notNumber
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return 0, 0, notNumber
	}
	switch v := v.(type) {
	case int:
		return int64(v), 0, wholeNumber
	case int64:
		return v, 0, wholeNumber
	case uint64:
		return 0, float64(v), outOfRange
	case float64:
		switch {
		case math.IsNaN(v) || v != math.Trunc(v):
			return 0, v, fraction
		case math.Abs(v) >= 1<<62:
			return 0, v, outOfRange
		}
		return int64(v), 0, wholeNumber
	}
	return 0, 0, notNumber
}

// integer returns the value of f, which must be a whole number.
func (p *parser) integer(f field) (int64, bool) {
	i, _, kind := number(f.val)
	switch kind {
	case wholeNumber:
		return i, true
	case fraction:
		p.errorf(f.line, "%s must be a whole number, not %s", f.name, f.val.Value)
	case outOfRange:
		p.errorf(f.line, "%s %s is out of range", f.name, f.val.Value)
	default:
		p.wrongType(f, "a whole number")
	}
	return 0, false
}
