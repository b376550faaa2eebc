package proxy

import (
	"fmt"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
)

// HeaderMode selects which rate-limit headers responses carry. It is a
// pflag.Value, for --ratelimit-headers.
type HeaderMode uint8

// The header modes of --ratelimit-headers.
const (
	HeadersBoth   HeaderMode = iota // draft and legacy
	HeadersDraft                    // RateLimit-Policy and RateLimit (IETF draft -10)
	HeadersLegacy                   // X-RateLimit-Limit/Remaining/Reset
	HeadersNone
)

var headerModeNames = []string{"both", "draft", "legacy", "none"}

func (m HeaderMode) String() string { return enumName(headerModeNames, int(m)) }

// Set parses a --ratelimit-headers value.
func (m *HeaderMode) Set(s string) error {
	i, err := enumflag.Index(s, headerModeNames)
	if err == nil {
		*m = HeaderMode(i)
	}
	return err
}

// Type names the flag's values in help text.
func (*HeaderMode) Type() string { return strings.Join(headerModeNames, "|") }

func enumName(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%d", i)
}
