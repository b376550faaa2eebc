package ratelimitheader

import (
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
)

// Mode selects which rate-limit headers responses carry. It is a
// pflag.Value, for --ratelimit-headers. The zero value is Both.
type Mode uint8

// The header modes of --ratelimit-headers.
const (
	Both   Mode = iota // draft and legacy
	Draft              // RateLimit-Policy and RateLimit (IETF draft -10)
	Legacy             // X-RateLimit-Limit/Remaining/Reset
	None
)

var modeNames = []string{"both", "draft", "legacy", "none"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return strconv.Itoa(int(m))
}

// Set parses a --ratelimit-headers value.
func (m *Mode) Set(s string) error {
	i, err := enumflag.Index(s, modeNames)
	if err == nil {
		*m = Mode(i)
	}
	return err
}

// Type names the flag's values in help text.
func (*Mode) Type() string { return strings.Join(modeNames, "|") }

// Draft reports whether m includes the draft headers, RateLimit-Policy
// and RateLimit.
func (m Mode) Draft() bool { return m == Both || m == Draft }

// Legacy reports whether m includes the X-RateLimit-* headers.
func (m Mode) Legacy() bool { return m == Both || m == Legacy }
