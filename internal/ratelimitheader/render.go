// Package ratelimitheader renders the rate-limit headers of a decision
// (docs/rules.md, "Responses"): RateLimit-Policy and RateLimit of the IETF
// httpapi draft -10 (draft-ietf-httpapi-ratelimit-headers), and the legacy
// X-RateLimit-Limit, -Remaining and -Reset. It is the one renderer of
// them: `gateway serve`'s responses (package proxy, from the names and
// policies package ruleset renders when it compiles the rules) and
// `gateway rls`'s response_headers_to_add (package rls) use it alike.
//
// It renders values; it must not decide, pick the headers' names on the
// wire, or write responses: those are its callers'.
package ratelimitheader

import (
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Quote returns name as a structured-field string (RFC 8941 §3.3.3), the
// name of a limit in RateLimit-Policy and RateLimit. A string holds only
// printable ASCII: each byte it cannot hold (a control character, or a
// byte of a non-ASCII character) is written "?", so that a name keeps its
// length and never reads as another limit's name with the character left
// out ("/café" is "/caf??", not "/caf").
func Quote(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// AppendPolicy appends the RateLimit-Policy item of a limit named quoted
// (Quote) of lim per window: `"name";q=lim;w=seconds`.
func AppendPolicy(b []byte, quoted string, lim int64, window time.Duration) []byte {
	b = append(b, quoted...)
	b = strconv.AppendInt(append(b, ";q="...), lim, 10)
	return strconv.AppendInt(append(b, ";w="...), Seconds(window), 10)
}

// AppendState appends the RateLimit item of a limit named quoted with
// remaining units left (none when negative) until reset:
// `"name";r=remaining;t=seconds`. A limit of 0 (blocked) has no ";t=":
// no wait would help.
func AppendState(b []byte, quoted string, remaining int64, reset time.Duration, blocked bool) []byte {
	b = append(b, quoted...)
	b = strconv.AppendInt(append(b, ";r="...), max(remaining, 0), 10)
	if blocked {
		return b
	}
	return strconv.AppendInt(append(b, ";t="...), Seconds(reset), 10)
}

// MoreConstraining reports whether a leaves less room than b: denied
// first, then fewer remaining, then a longer wait. The legacy headers
// describe the most constraining limit.
func MoreConstraining(a, b limit.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// Seconds returns d in whole seconds, rounded up, 0 when not positive:
// the headers' delta-seconds.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
