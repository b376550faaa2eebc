package trie

import (
	"fmt"
	"strings"
)

// ParseMethod checks an HTTP method as a rule names it and returns it in
// upper case, the form Insert takes and Match compares. A method is a
// token (RFC 9110 §9.1 and §5.6.2); the registered methods are upper
// case, so a rule may name GET as "get".
//
// Errors are plain sentences fit for a rule-file message.
func ParseMethod(m string) (string, error) {
	if !isToken(m) {
		if strings.ContainsAny(m, ", ") {
			return "", fmt.Errorf("method %q is not a valid HTTP method; write several methods as a list like [GET, POST]", m)
		}
		return "", fmt.Errorf("method %q is not a valid HTTP method; use a name like GET or POST", m)
	}
	// A token is ASCII, so ToUpper changes only its ASCII letters (it
	// would map some other letters to ASCII ones: "ſ" to "S").
	return strings.ToUpper(m), nil
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
