package trie

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ParsePattern checks a rule's api pattern and returns it in canonical form
// (one leading slash, no trailing slash except for the root "/") together
// with its segments. A segment is a literal or a {name} variable that
// matches exactly one path segment.
//
// Literals are written decoded, as Normalize leaves a path: "/files/a b",
// not "/files/a%20b". A variable name is an identifier and appears once per
// pattern. The names do not matter for matching: "/x/{a}" and "/x/{b}" are
// the same pattern.
//
// Errors are plain sentences fit for a rule-file message.
func ParsePattern(pattern string) (canonical string, segments []string, err error) {
	if pattern == "" {
		return "", nil, fmt.Errorf("api pattern is empty (use \"/\" to match every path)")
	}
	if pattern[0] != '/' {
		return "", nil, fmt.Errorf("api pattern %q must start with \"/\"", pattern)
	}
	p := strings.TrimSuffix(pattern, "/")
	if p == "" {
		return "/", nil, nil
	}
	if !utf8.ValidString(p) {
		return "", nil, fmt.Errorf("api pattern %q is not valid utf-8", pattern)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if err := checkSegment(pattern, seg); err != nil {
			return "", nil, err
		}
		if IsVar(seg) {
			for _, prev := range segments {
				if prev == seg {
					return "", nil, fmt.Errorf("api pattern %q uses the variable %s twice", pattern, seg)
				}
			}
		}
		segments = append(segments, seg)
	}
	return p, segments, nil
}

func checkSegment(pattern, seg string) error {
	switch seg {
	case "":
		return fmt.Errorf("api pattern %q has an empty segment (\"//\")", pattern)
	case ".", "..":
		return fmt.Errorf("api pattern %q has a %q segment; write the path it resolves to", pattern, seg)
	}
	if IsVar(seg) {
		name := seg[1 : len(seg)-1]
		if name == "" {
			return fmt.Errorf("api pattern %q has an unnamed variable \"{}\"", pattern)
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
				return fmt.Errorf("api pattern %q has a variable %q whose name is not an identifier", pattern, seg)
			}
		}
		return nil
	}
	for i := 0; i < len(seg); i++ {
		switch c := seg[i]; {
		case c == '{' || c == '}':
			return fmt.Errorf("api pattern %q has a segment %q with a brace; a variable must be a whole segment like {id}", pattern, seg)
		case c == '%':
			return fmt.Errorf("api pattern %q has a segment %q with a %%; write the path decoded (\"a b\", not \"a%%20b\")", pattern, seg)
		case c == '\\' || c == ';':
			return fmt.Errorf("api pattern %q has a segment %q with the character %q, which never appears in a normalized path", pattern, seg, c)
		case c == '?' || c == '#':
			return fmt.Errorf("api pattern %q has a segment %q with the character %q; query strings and fragments are never matched", pattern, seg, c)
		case c == '*':
			return fmt.Errorf("api pattern %q has a segment %q with a \"*\"; wildcards are not supported: a pattern already matches every path below it, and {name} matches one segment", pattern, seg)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("api pattern %q has a control character", pattern)
		}
	}
	return nil
}

// IsVar reports whether a pattern segment is a {name} variable.
func IsVar(seg string) bool {
	return len(seg) >= 2 && seg[0] == '{' && seg[len(seg)-1] == '}'
}
