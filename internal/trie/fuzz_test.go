package trie

import (
	"net/url"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"/", "//", "/v1/user", "/v1/user/", "/v1//user/./x/../y", "/../x", "/a/%2e%2e/b",
		"/a/.%2E/b", "/%41%62c", "/a%2Fb", "/a%2fb", "/a\\b", "/a%5Cb", "/a%00b", "/a%0d%0a",
		"/v1/user;jsessionid=1/42", "/a/..;/b", "/a/%3B/b", "/a/%C0%AE%C0%AE/", "/caf%C3%A9",
		"/100%25", "/%252e%252e/x", "/a%", "/a%4", "/a%zz", "x", "", "/;", "/.;x/", "/\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Normalize(in)
		ref, refErr := normalizeReference(in)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("Normalize(%q): got %q, %v; the reference gives %q, %v", in, out, err, ref, refErr)
		}
		if err != nil {
			if out != "" {
				t.Errorf("Normalize(%q): got %q with error %v, want \"\"", in, out, err)
			}
			return
		}
		if out != ref {
			t.Errorf("Normalize(%q): got %q, the reference gives %q", in, out, ref)
		}
		if isClean(in) {
			if slow, err := normalizeSlow(in); slow != in || err != nil {
				t.Errorf("normalizeSlow(%q) of a clean path: got %q, %v, want it unchanged", in, slow, err)
			}
		}
		checkNormalized(t, in, out)

		// The proxy forwards out as URL.Path: what the upstream receives
		// normalizes to out again, and out itself is stable.
		again := (&url.URL{Path: out}).EscapedPath()
		if got, err := Normalize(again); got != out || err != nil {
			t.Errorf("Normalize(%q) (%q escaped again): got %q, %v, want %q", again, out, got, err, out)
		}
		if !strings.Contains(out, "%") {
			if got, err := Normalize(out); got != out || err != nil {
				t.Errorf("Normalize(%q) (output of %q): got %q, %v, want it unchanged", out, in, got, err)
			}
		}
	})
}

// checkNormalized checks the shape of a path Normalize returned.
func checkNormalized(t *testing.T, in, out string) {
	t.Helper()
	switch {
	case !strings.HasPrefix(out, "/"):
		t.Errorf("Normalize(%q) = %q does not start with /", in, out)
	case strings.Contains(out, "//"):
		t.Errorf("Normalize(%q) = %q has //", in, out)
	case strings.ContainsAny(out, ";\\\x00"):
		t.Errorf("Normalize(%q) = %q has ; or \\ or NUL", in, out)
	case !utf8.ValidString(out):
		t.Errorf("Normalize(%q) = %q is not valid utf-8", in, out)
	}
	for _, seg := range strings.Split(out, "/") {
		if seg == "." || seg == ".." {
			t.Errorf("Normalize(%q) = %q has a %q segment", in, out, seg)
		}
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; c < 0x20 || c == 0x7f {
			t.Errorf("Normalize(%q) = %q has control character %#x", in, out, c)
		}
	}
	if want := path.Clean(out); out != want && out != want+"/" {
		t.Errorf("Normalize(%q) = %q is not path.Clean'd (%q)", in, out, want)
	}
}

// normalizeReference is Normalize written plainly with the standard
// library, for FuzzNormalize to compare against. It reports only whether
// the path is rejected, not why.
func normalizeReference(in string) (string, error) {
	if !strings.HasPrefix(in, "/") {
		return "", ErrNotAbsolute
	}
	dec, err := url.PathUnescape(in)
	if err != nil {
		return "", err
	}
	// Every % left in a successfully unescaped path starts an escape.
	if strings.Contains(strings.ToLower(in), "%2f") {
		return "", ErrEncodedSlash
	}
	if strings.ContainsRune(dec, '\\') {
		return "", ErrBackslash
	}
	for _, c := range []byte(dec) {
		if c < 0x20 || c == 0x7f {
			return "", ErrControlChar
		}
	}
	if !utf8.ValidString(dec) {
		return "", ErrInvalidUTF8
	}
	segs := strings.Split(dec[1:], "/")
	for i, seg := range segs {
		segs[i], _, _ = strings.Cut(seg, ";")
	}
	out := path.Clean("/" + strings.Join(segs, "/"))
	if segs[len(segs)-1] == "" && out != "/" {
		out += "/"
	}
	return out, nil
}

func FuzzMatch(f *testing.F) {
	// rules: one per line, "pattern" or "pattern GET|POST".
	rules := "/\n/v1/user\n/v1/user GET\n/v1/user/{id}/orders\n/v1/{x}/d POST|PUT\n/a/b/c\n/a/{x}/d\n/{y}/b/c"
	for _, s := range []struct {
		rules  string
		ci     bool
		method string
		path   string
	}{
		{rules, false, "GET", "/v1/user/42/orders"},
		{rules, true, "GET", "/V1/USER/42/ORDERS/1"},
		{rules, false, "POST", "/v1/user/d"},
		{rules, false, "GET", "/a/b/d"},
		{rules, false, "GET", "/a/b/c"},
		{rules, false, "GET", "/v1/username"},
		{rules, false, "DELETE", "/v1/user/"},
		{"/x/{a} GET\n/x/{b} POST\n/x/y", false, "POST", "/x/y/z"},
		{"/A/B\n/a/{x}", true, "GET", "/a/b"},
		{"", false, "GET", "/"},
		{rules, false, "GET", "v1//user"},
	} {
		f.Add(s.rules, s.ci, s.method, s.path)
	}
	f.Fuzz(func(t *testing.T, rules string, ci bool, method, rawPath string) {
		tr := New[int](Options{CaseInsensitive: ci})
		var inserted []refRule
		for i, line := range strings.Split(rules, "\n") {
			pattern, m, hasMethods := strings.Cut(line, " ")
			var methods []string
			if hasMethods {
				methods = strings.Split(m, "|")
			}
			if err := tr.Insert(pattern, methods, i); err != nil {
				continue
			}
			_, segs, _ := ParsePattern(pattern)
			inserted = append(inserted, refRule{segs: segs, methods: methods, value: i})
		}
		if tr.Len() != len(inserted) {
			t.Fatalf("Len: got %d, want %d", tr.Len(), len(inserted))
		}
		p := rawPath
		if clean, err := Normalize(rawPath); err == nil {
			p = clean
		}
		got, _, ok := tr.Match(method, p)
		want, wantOK, matching := matchReference(inserted, ci, method, p)
		if ok != wantOK || got != want {
			t.Fatalf("Match(%q, %q): got rule %d (%v), the reference gives %d (%v)", method, p, got, ok, want, wantOK)
		}

		cands := tr.Explain(method, p)
		if len(cands) != matching {
			t.Errorf("Explain(%q, %q): got %d candidates, want %d", method, p, len(cands), matching)
		}
		chosen := 0
		for i, c := range cands {
			if c.Chosen {
				chosen++
				if c.Value != got {
					t.Errorf("Explain(%q, %q): chose rule %d, Match chose %d", method, p, c.Value, got)
				}
				for _, before := range cands[:i] {
					if len(before.Methods) == 0 || containsString(before.Methods, method) {
						t.Errorf("Explain(%q, %q): rule %d that applies comes before the chosen %d", method, p, before.Value, c.Value)
					}
				}
			}
			if c.Reason == "" {
				t.Errorf("Explain(%q, %q): rule %d has no reason", method, p, c.Value)
			}
		}
		if want := map[bool]int{true: 1, false: 0}[ok]; chosen != want {
			t.Errorf("Explain(%q, %q): got %d chosen, want %d", method, p, chosen, want)
		}
	})
}

type refRule struct {
	segs    []string
	methods []string
	value   int
}

// matchReference finds the best rule by comparing every rule with every
// other, as the precedence rules say; it also counts the rules whose
// pattern matches regardless of method.
func matchReference(rules []refRule, ci bool, method, p string) (value int, ok bool, matching int) {
	if !strings.HasPrefix(p, "/") {
		return 0, false, 0
	}
	segs := strings.Split(p[1:], "/")
	var best *refRule
	for i := range rules {
		r := &rules[i]
		if !refPatternMatches(r.segs, segs, ci) {
			continue
		}
		matching++
		if len(r.methods) > 0 && !containsString(r.methods, method) {
			continue
		}
		if best == nil || refBeats(r, best) {
			best = r
		}
	}
	if best == nil {
		return 0, false, matching
	}
	return best.value, true, matching
}

func refPatternMatches(pattern, segs []string, ci bool) bool {
	if len(pattern) > len(segs) {
		return false
	}
	for i, ps := range pattern {
		s := segs[i]
		switch {
		case s == "":
			return false
		case IsVar(ps):
		case ps == s:
		case ci && refLower(ps) == refLower(s):
		default:
			return false
		}
	}
	return true
}

// refBeats reports whether a takes precedence over b.
func refBeats(a, b *refRule) bool {
	if len(a.segs) != len(b.segs) {
		return len(a.segs) > len(b.segs)
	}
	for i := range a.segs {
		if va, vb := IsVar(a.segs[i]), IsVar(b.segs[i]); va != vb {
			return vb
		}
	}
	return len(a.methods) > 0 && len(b.methods) == 0
}

func refLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
