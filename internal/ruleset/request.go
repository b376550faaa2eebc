package ruleset

// This file holds the checks a request is judged by before it is matched,
// shared by the request path (package proxy) and Explain.

import (
	"errors"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

var (
	errAppIDEmpty   = errors.New("the app ID header is present but empty")
	errAppIDTooLong = errors.New("the app ID header is longer than 128 bytes")
	errAppIDChars   = errors.New("the app ID header may contain only letters, digits and . _ : -")
)

// CheckAppID returns v if it is a valid app ID, or why it is not, as the
// gateway judges the app header (replay judges logged app IDs with it).
func CheckAppID(v string) (string, error) {
	switch {
	case v == "":
		return "", errAppIDEmpty
	case len(v) > config.MaxAppIDLen:
		return "", errAppIDTooLong
	case !config.ValidAppID(v):
		return "", errAppIDChars
	}
	return v, nil
}

// CanonicalMethod returns method s as the rules match it: with ASCII
// letters upper-cased. It allocates only when s has a lower-case letter.
func CanonicalMethod(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return strings.ToUpper(s)
		}
	}
	return s
}

// ValidMethod reports whether m is an HTTP method token (RFC 9110 §9.1).
func ValidMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
