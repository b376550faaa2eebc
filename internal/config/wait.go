package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxMaxDelay is the longest maxDelay a rule may set: a request waits at
// most this long for room before it is admitted or refused.
const MaxMaxDelay = time.Minute

// maxDelay reads a rule's maxDelay (docs/plans-and-tokens.md): a Go
// duration string, 0 < d ≤ MaxMaxDelay, not on a shadow rule.
func (p *parser) maxDelay(f field, shadow bool) (time.Duration, bool) {
	n := f.val
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		if _, _, kind := number(n); kind != notNumber {
			p.errorf(f.line, "maxDelay %s has no time unit; write a duration like %q", n.Value, n.Value+"s")
		} else {
			p.wrongType(f, `a duration like "2s"`)
		}
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	switch {
	case err != nil:
		p.errorf(f.line, "maxDelay %q is not a duration; write one like \"2s\" or \"500ms\"", n.Value)
	case d <= 0 || d > MaxMaxDelay:
		p.errorf(f.line, "maxDelay %q is outside (0, %s]; it is how long a request over the limit may wait for room", n.Value, MaxMaxDelay)
	case shadow:
		p.errorf(f.line, "maxDelay cannot be set on a shadow rule: a shadow rule never refuses, so nothing waits; remove shadow or maxDelay")
	default:
		return d, true
	}
	return 0, false
}
