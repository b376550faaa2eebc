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

// FailMode is what the handler does with a request when the store fails
// (docs/fleet.md, "Redis: one limit for a fleet of gateways"). It is a
// pflag.Value, for --fail-mode.
type FailMode uint8

// The fail modes.
const (
	// FailOpen admits the request (decision fail_open): a broken limiter
	// must not take the service down.
	FailOpen FailMode = iota
	// FailClosed answers 503 limiter_unavailable (decision fail_closed).
	FailClosed
	// FailLocal decides in memory with each limit scaled by the local
	// share (ruleset.CompileOptions), as if each gateway had its share
	// of the fleet's limit.
	FailLocal
)

var failModeNames = []string{"open", "closed", "local"}

// String returns the --fail-mode value of m.
func (m FailMode) String() string { return enumName(failModeNames, int(m)) }

// Set parses a --fail-mode value.
func (m *FailMode) Set(s string) error {
	i, err := enumflag.Index(s, failModeNames)
	if err == nil {
		*m = FailMode(i)
	}
	return err
}

// Type names the flag's values in help text.
func (*FailMode) Type() string { return strings.Join(failModeNames, "|") }

func enumName(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%d", i)
}
