package trie

import (
	"fmt"
	"slices"
	"strings"
)

// Candidate is a rule whose pattern matches a path, as reported by Explain.
type Candidate[V any] struct {
	// Pattern is the rule's canonical pattern.
	Pattern string
	// Methods are the methods the rule is restricted to; nil for every
	// method.
	Methods []string
	// Value is the value inserted with the rule.
	Value V
	// Chosen reports whether this is the rule Match returns.
	Chosen bool
	// Reason says in a short phrase why the rule was chosen or not, such as
	// `matches 3 of 3 segments; beats "/v1/{x}/orders": literal "user"
	// beats {x} at segment 2` or "method POST not in [GET]".
	Reason string
}

// hit is a rule whose pattern matches the path, with what orders it.
type hit[V any] struct {
	r     *rule[V]
	depth int // segments matched
	order int // preorder of its node, literal first: precedence within a depth
	rank  int // 0 lists the method, 1 every method, 2 does not apply
}

// Explain returns every rule whose pattern matches path, for any method, in
// precedence order, marking the one Match(method, path) returns as Chosen
// and saying why each one won or lost. It is meant for people (the match
// command), not for the request path: it allocates.
func (t *Trie[V]) Explain(method, path string) []Candidate[V] {
	if t.root == nil || path == "" || path[0] != '/' {
		return nil
	}
	var hits []hit[V]
	order := 0
	var walk func(n *node[V], rest string, depth int)
	walk = func(n *node[V], rest string, depth int) {
		order++
		for _, r := range n.rules {
			hits = append(hits, hit[V]{r: r, depth: depth, order: order, rank: rank(r, method)})
		}
		seg, next, ok := nextSegment(rest)
		if !ok {
			return
		}
		if c := n.child(seg, t.fold); c != nil {
			walk(c, next, depth+1)
		}
		if n.wild != nil {
			walk(n.wild, next, depth+1)
		}
	}
	walk(t.root, path, 0)
	slices.SortFunc(hits, func(a, b hit[V]) int {
		switch {
		case a.depth != b.depth:
			return b.depth - a.depth
		case a.order != b.order:
			return a.order - b.order
		case a.rank != b.rank:
			return a.rank - b.rank
		}
		return a.r.seq - b.r.seq
	})

	chosen := t.match(method, path)
	var win *hit[V]
	for i := range hits {
		if hits[i].r == chosen {
			win = &hits[i]
		}
	}
	total := countSegments(path)
	out := make([]Candidate[V], len(hits))
	for i, h := range hits {
		c := Candidate[V]{
			Pattern: h.r.pattern,
			Methods: slices.Clone(h.r.methods),
			Value:   h.r.value,
			Chosen:  h.r == chosen,
		}
		matches := fmt.Sprintf("matches %d of %d segments", h.depth, total)
		switch {
		case h.rank == 2:
			c.Reason = fmt.Sprintf("method %s not in [%s]", methodName(method), strings.Join(h.r.methods, " "))
		case c.Chosen:
			c.Reason = matches + "; the only rule that applies"
			if next := nextApplicable(hits[i+1:]); next != nil {
				c.Reason = fmt.Sprintf("%s; beats %q: %s", matches, next.r.pattern, why(h, *next, method))
			}
		case win != nil:
			c.Reason = fmt.Sprintf("%s; %q wins: %s", matches, win.r.pattern, why(*win, h, method))
		}
		out[i] = c
	}
	return out
}

// rank orders rules of one pattern by how they apply to method.
func rank[V any](r *rule[V], method string) int {
	if len(r.methods) == 0 {
		return 1
	}
	if slices.Contains(r.methods, method) {
		return 0
	}
	return 2
}

func nextApplicable[V any](hits []hit[V]) *hit[V] {
	for i := range hits {
		if hits[i].rank < 2 {
			return &hits[i]
		}
	}
	return nil
}

// why says why a, which comes first in precedence order, beats b for a
// request with method.
func why[V any](a, b hit[V], method string) string {
	if a.depth != b.depth {
		return fmt.Sprintf("%d matching segments beat %d", a.depth, b.depth)
	}
	for i, sa := range a.r.segments {
		sb := b.r.segments[i]
		if IsVar(sa) != IsVar(sb) {
			return fmt.Sprintf("literal %q beats %s at segment %d", sa, sb, i+1)
		}
	}
	return fmt.Sprintf("a rule listing %s beats a rule for every method", methodName(method))
}

func methodName(m string) string {
	if m == "" {
		return `""`
	}
	return m
}

// nextSegment splits rest ("" or starting with "/") into its first segment
// and what follows; ok is false when no non-empty segment is left.
func nextSegment(rest string) (seg, next string, ok bool) {
	if len(rest) < 2 {
		return "", "", false
	}
	seg = rest[1:]
	if i := strings.IndexByte(seg, '/'); i >= 0 {
		seg, next = seg[:i], seg[i:]
	}
	return seg, next, seg != ""
}

// countSegments counts the segments of path a rule could match: those
// before the first empty one.
func countSegments(path string) int {
	n := 0
	for {
		_, next, ok := nextSegment(path)
		if !ok {
			return n
		}
		n++
		path = next
	}
}
