package trie

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf8"
)

// Errors returned by Normalize. Each is a plain sentence that callers may
// show to the client in a 400 response.
var (
	ErrNotAbsolute  = errors.New("path does not start with a slash")
	ErrBadEscape    = errors.New("path has a malformed percent-escape")
	ErrEncodedSlash = errors.New("path has an encoded slash (%2F)")
	ErrBackslash    = errors.New("path has a backslash")
	ErrNUL          = errors.New("path has a nul byte")
	ErrControlChar  = errors.New("path has a control character")
	ErrInvalidUTF8  = errors.New("path is not valid utf-8 once decoded")
	ErrFoldsToASCII = errors.New("path has a letter that case-folds to an ASCII letter (U+017F ſ or U+212A K)")
)

// Normalize turns an escaped request path (as from url.URL.EscapedPath,
// without the query) into the one path that is both matched against the
// rules and forwarded upstream, so that the upstream can never be asked for
// a different resource from the one that was counted (step 2, "Path", of
// docs/rules.md, "How a request is handled").
//
// It decodes every percent-escape; drops segment parameters (from the first
// ";" to the end of each segment, so "/v1/user;jsessionid=1/42" becomes
// "/v1/user/42" and "/a/..;x/b" becomes "/b"); then cleans the result like
// path.Clean (collapses "//", drops "." and resolves ".." clamped at the
// root) except that a trailing slash is kept. Parameters are cut after
// decoding, so an encoded "%3B" cuts too and the result never holds a ";"
// that an upstream could read differently.
//
// The result is decoded and may hold characters such as "%", "?" or a space:
// set it as url.URL.Path and clear RawPath, and net/url escapes them again
// when the request is forwarded; Normalize of that escaped form is the
// result again.
//
// It rejects, with one of the Err* sentinels above, a path that does not
// start with "/", a malformed escape, an encoded slash (the upstream would
// split segments where the matcher did not), a backslash raw or encoded
// (some servers read it as "/"), a NUL or other control character, and bytes
// that are not valid UTF-8 once decoded (this catches overlong forms such as
// %C0%AE that some decoders read as "."). It also rejects the two letters
// outside ASCII that Unicode case folding turns into ASCII ones (ſ into s,
// the Kelvin sign into k): matching folds ASCII case only, and an upstream
// that folds Unicode case (Go's strings.EqualFold, .NET's invariant
// culture) would serve /v1/ſecret as /v1/secret past a rule on the latter.
//
// A path that is already clean is returned as is, without allocating.
func Normalize(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' {
		return "", ErrNotAbsolute
	}
	if isClean(escaped) {
		return escaped, nil
	}
	return normalizeSlow(escaped)
}

// isClean reports whether p (which starts with "/") is its own
// normalization: no escape, no parameter, no empty segment except a
// trailing one, no dot segment, no forbidden byte, valid UTF-8.
func isClean(p string) bool {
	ascii := true
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' || c == ';' || c == '\\' || c < 0x20 || c == 0x7f:
			return false
		case c >= 0x80:
			ascii = false
		case c == '/':
			rest := p[i+1:]
			if len(rest) == 0 {
				continue
			}
			switch rest[0] {
			case '/':
				return false
			case '.':
				if rest == "." || rest == ".." || hasPrefix(rest, "./") || hasPrefix(rest, "../") {
					return false
				}
			}
		}
	}
	return ascii || utf8.ValidString(p) && !strings.ContainsAny(p, foldsToASCII)
}

// foldsToASCII are the letters outside ASCII whose simple case folding
// (unicode.SimpleFold) reaches an ASCII letter.
const foldsToASCII = "\u017f\u212a"

func hasPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == prefix
}

// normalizeSlow decodes p into a buffer, checking every byte, then cleans
// the buffer in place.
func normalizeSlow(p string) (string, error) {
	buf := make([]byte, 0, len(p)+1)
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) {
				return "", ErrBadEscape
			}
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if !ok1 || !ok2 {
				return "", ErrBadEscape
			}
			c = hi<<4 | lo
			if c == '/' {
				return "", ErrEncodedSlash
			}
			i += 2
		}
		switch {
		case c == '\\':
			return "", ErrBackslash
		case c == 0:
			return "", ErrNUL
		case c < 0x20 || c == 0x7f:
			return "", ErrControlChar
		}
		buf = append(buf, c)
	}
	if !utf8.Valid(buf) {
		return "", ErrInvalidUTF8
	}
	if bytes.ContainsAny(buf, foldsToASCII) {
		return "", ErrFoldsToASCII
	}
	return string(clean(buf)), nil
}

// clean cleans the decoded path b (which starts with "/") in place and
// returns the cleaned prefix of b. Writing never overtakes reading: each
// segment is written at most as long as it was read.
func clean(b []byte) []byte {
	w := 0 // b[:w] is the output so far: "" or "/seg/seg"
	trailing := false
	for r := 0; r < len(b); {
		// b[r] == '/': read the segment after it.
		start := r + 1
		end := start
		for end < len(b) && b[end] != '/' {
			end++
		}
		seg := b[start:end]
		for k, c := range seg {
			if c == ';' {
				seg = seg[:k]
				break
			}
		}
		trailing = false
		switch {
		case len(seg) == 0:
			trailing = end == len(b)
		case len(seg) == 1 && seg[0] == '.':
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			for w > 0 {
				w--
				if b[w] == '/' {
					break
				}
			}
		default:
			b[w] = '/'
			w++
			w += copy(b[w:], seg)
		}
		r = end
	}
	if w == 0 || trailing {
		b[w] = '/'
		w++
	}
	return b[:w]
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
