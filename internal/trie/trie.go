package trie

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDuplicate is wrapped by the error Insert returns for a rule whose
// pattern and method are already taken (a *DuplicateError).
var ErrDuplicate = errors.New("duplicate rule")

// DuplicateError is the error Insert returns for a rule that a rule
// inserted before already covers: the same pattern (variable names aside,
// and ASCII case aside in a case-insensitive trie) for one of the same
// methods, or both for every method. It wraps ErrDuplicate.
type DuplicateError[V any] struct {
	// Pattern is the canonical pattern of the rule that Insert refused.
	Pattern string
	// Method is a method that both rules list, "" when both are for every
	// method.
	Method string
	// Existing is the canonical pattern of the rule inserted before, as
	// it was written, and Value its value.
	Existing string
	Value    V
}

func (e *DuplicateError[V]) Error() string {
	what := "every method"
	if e.Method != "" {
		what = "method " + e.Method
	}
	if e.Pattern == e.Existing {
		return fmt.Sprintf("%v: api pattern %q is given twice for %s", ErrDuplicate, e.Pattern, what)
	}
	return fmt.Sprintf("%v: api pattern %q is the same as %q, both for %s", ErrDuplicate, e.Pattern, e.Existing, what)
}

// Unwrap returns ErrDuplicate.
func (e *DuplicateError[V]) Unwrap() error { return ErrDuplicate }

// Options configure a Trie.
type Options struct {
	// CaseInsensitive makes literal segments match regardless of ASCII case,
	// so the rule "/v1/user" matches "/V1/User". Variables match any segment
	// either way; non-ASCII letters are compared exactly. Default false:
	// matching is case-sensitive.
	CaseInsensitive bool
}

// Trie holds rules keyed by path pattern and finds the most specific one
// for a request (see the package documentation for the precedence).
//
// A Trie is built once and then only read: Insert must not be called
// concurrently with any other method, but once the last Insert has returned
// (and the Trie has been published, for example with an atomic.Pointer),
// Match, Explain and Len are safe for concurrent use without locks. Match
// does not allocate.
//
// The zero value is an empty case-sensitive Trie ready to use.
type Trie[V any] struct {
	root *node[V]
	fold bool
	n    int
}

// rule is one inserted rule.
type rule[V any] struct {
	pattern  string   // canonical, as written (case kept)
	segments []string // pattern segments, as written
	methods  []string // nil for every method
	value    V
	seq      int // insertion order
}

// node is a position in the trie: the rules that end at it and its
// children. A node is reached by exactly one sequence of literal and
// variable steps, so every pattern has one node and the {a} and {b}
// spellings of a variable share it.
type node[V any] struct {
	// lits are the literal children by segment (lower-cased when the trie
	// is case-insensitive).
	lits map[string]*node[V]
	// long lists, in a case-insensitive trie, the literal children whose
	// key is longer than foldBufLen: Match cannot fold a segment that long
	// into its stack buffer, so it compares them one by one instead.
	long []*node[V]
	key  string // this node's key in its parent's lits
	// wild is the {var} child.
	wild *node[V]

	any      *rule[V]        // the rule for every method, if any
	byMethod []methodRule[V] // rules restricted to a method, one per method
	rules    []*rule[V]      // every rule ending here, in insertion order

	// maxDepth is the depth of the deepest rule in this subtree, -1 if none.
	// Match skips subtrees that cannot beat what it already found.
	maxDepth int
}

type methodRule[V any] struct {
	method string
	rule   *rule[V]
}

// foldBufLen bounds the segments Match folds on the stack; see node.long.
const foldBufLen = 128

// New returns an empty Trie.
func New[V any](opts Options) *Trie[V] {
	return &Trie[V]{fold: opts.CaseInsensitive}
}

// Len returns the number of rules inserted.
func (t *Trie[V]) Len() int { return t.n }

// Insert adds a rule for pattern (see ParsePattern) restricted to methods,
// HTTP methods as ParseMethod returns them, such as "GET"; no methods
// means every method. It returns a *DuplicateError if a rule with the
// same pattern (variable names aside, and ASCII case aside in a
// case-insensitive trie) already covers one of the methods, or both rules
// cover every method. Insert must not be called concurrently with any
// other method.
func (t *Trie[V]) Insert(pattern string, methods []string, v V) error {
	canonical, segments, err := ParsePattern(pattern)
	if err != nil {
		return err
	}
	if err := checkMethods(canonical, methods); err != nil {
		return err
	}
	if t.root == nil {
		t.root = newNode[V]("")
	}
	path := make([]*node[V], 0, len(segments)+1)
	n := t.root
	path = append(path, n)
	for _, seg := range segments {
		n = t.step(n, seg)
		path = append(path, n)
	}
	r := &rule[V]{pattern: canonical, segments: segments, value: v, seq: t.n}
	if len(methods) > 0 {
		r.methods = append([]string(nil), methods...)
	}
	if err := n.add(r); err != nil {
		return err
	}
	for _, p := range path {
		p.maxDepth = max(p.maxDepth, len(segments))
	}
	t.n++
	return nil
}

func newNode[V any](key string) *node[V] {
	return &node[V]{key: key, maxDepth: -1}
}

// step returns n's child for the pattern segment seg, creating it.
func (t *Trie[V]) step(n *node[V], seg string) *node[V] {
	if IsVar(seg) {
		if n.wild == nil {
			n.wild = newNode[V]("")
		}
		return n.wild
	}
	key := seg
	if t.fold {
		key = strings.Map(lowerASCII, seg)
	}
	if c := n.lits[key]; c != nil {
		return c
	}
	c := newNode[V](key)
	if n.lits == nil {
		n.lits = make(map[string]*node[V])
	}
	n.lits[key] = c
	if t.fold && len(key) > foldBufLen {
		n.long = append(n.long, c)
	}
	return c
}

// add attaches r to n unless it duplicates a rule already there.
func (n *node[V]) add(r *rule[V]) error {
	if len(r.methods) == 0 {
		if n.any != nil {
			return duplicate(r, n.any, "")
		}
		n.any = r
	} else {
		for _, m := range r.methods {
			for _, mr := range n.byMethod {
				if mr.method == m {
					return duplicate(r, mr.rule, m)
				}
			}
		}
		for _, m := range r.methods {
			n.byMethod = append(n.byMethod, methodRule[V]{method: m, rule: r})
		}
	}
	n.rules = append(n.rules, r)
	return nil
}

func duplicate[V any](r, old *rule[V], method string) error {
	return &DuplicateError[V]{Pattern: r.pattern, Method: method, Existing: old.pattern, Value: old.value}
}

// checkMethods rejects a method list Match could never match as written:
// each method must be what ParseMethod returns for it, and listed once.
func checkMethods(pattern string, methods []string) error {
	for i, m := range methods {
		if m == "" {
			return fmt.Errorf("api pattern %q has an empty method", pattern)
		}
		if c, err := ParseMethod(m); err != nil || c != m {
			return fmt.Errorf("api pattern %q has method %q, which is not an upper-case HTTP method like GET", pattern, m)
		}
		if slices.Contains(methods[:i], m) {
			return fmt.Errorf("api pattern %q lists method %s twice", pattern, m)
		}
	}
	return nil
}

// Match returns the value and canonical pattern of the most specific rule
// for a request with this method and path, and whether there is one. path
// must be the output of Normalize; a path that does not start with "/"
// matches nothing. Match visits each trie node at most once, backtracking
// from a literal branch that dead-ends to the {var} branch beside it, and
// does not allocate.
func (t *Trie[V]) Match(method, path string) (v V, pattern string, ok bool) {
	r := t.match(method, path)
	if r == nil {
		return v, "", false
	}
	return r.value, r.pattern, true
}

func (t *Trie[V]) match(method, path string) *rule[V] {
	if t.root == nil || path == "" || path[0] != '/' {
		return nil
	}
	s := search[V]{method: method, fold: t.fold, depth: -1}
	s.visit(t.root, path, 0)
	return s.best
}

// search is the state of one Match: the best rule so far and its depth.
type search[V any] struct {
	method string
	fold   bool
	best   *rule[V]
	depth  int
}

// visit searches the subtree at n, which is depth segments deep; rest is
// the unmatched remainder of the path, "" or starting with "/".
//
// Children are tried literal first, so rules of equal depth are met in
// precedence order and the first one met at a depth keeps it; a subtree
// whose deepest rule is no deeper than the best so far is skipped.
func (s *search[V]) visit(n *node[V], rest string, depth int) {
	if depth > s.depth {
		if r := n.pick(s.method); r != nil {
			s.best, s.depth = r, depth
		}
	}
	seg, next, ok := nextSegment(rest)
	if !ok {
		return
	}
	if c := n.child(seg, s.fold); c != nil && c.maxDepth > s.depth {
		s.visit(c, next, depth+1)
	}
	if c := n.wild; c != nil && c.maxDepth > s.depth {
		s.visit(c, next, depth+1)
	}
}

// pick returns the rule at n that applies to method: the one listing it,
// else the one for every method, else nil.
func (n *node[V]) pick(method string) *rule[V] {
	for i := range n.byMethod {
		if n.byMethod[i].method == method {
			return n.byMethod[i].rule
		}
	}
	return n.any
}

// child returns n's literal child for the path segment seg, or nil.
func (n *node[V]) child(seg string, fold bool) *node[V] {
	if n.lits == nil {
		return nil
	}
	if !fold || !hasUpperASCII(seg) {
		return n.lits[seg]
	}
	if len(seg) <= foldBufLen {
		var buf [foldBufLen]byte
		for i := 0; i < len(seg); i++ {
			buf[i] = byte(lowerASCII(rune(seg[i])))
		}
		return n.lits[string(buf[:len(seg)])] // no allocation: see cmd/compile's map index of string(bytes)
	}
	for _, c := range n.long {
		if equalFoldASCII(c.key, seg) {
			return c
		}
	}
	return nil
}

func lowerASCII(r rune) rune {
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// equalFoldASCII reports whether a and b are equal ignoring ASCII case only
// (strings.EqualFold also folds Unicode, such as the Kelvin sign to "k").
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(rune(a[i])) != lowerASCII(rune(b[i])) {
			return false
		}
	}
	return true
}
