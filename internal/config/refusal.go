package config

import (
	"time"
)

// This file reads how a limit's refusals are written: errorFormat, the
// shape of the body, so that an SDK sees its provider's own error, and
// retryAfterMax, a cap on the Retry-After advertised (docs/plans-and-tokens.md,
// "Refusals in a provider's shape"). Both may be set on a rule, on a plan
// (for its rules) and on a route (for every refusal of a request taking
// it); the rule's setting wins over its plan's, and both over the route's.

// ErrorFormat is the shape of a refusal's body.
type ErrorFormat string

// The error formats.
const (
	// FormatDefault is the gateway's own body (docs/rules.md,
	// "Responses"). The empty ErrorFormat is FormatDefault when nothing
	// else sets one.
	FormatDefault ErrorFormat = "default"
	// FormatOpenAI is OpenAI's: {"error":{"message","type","param","code"}}.
	FormatOpenAI ErrorFormat = "openai"
	// FormatAnthropic is Anthropic's: {"type":"error","error":{"type","message"}}.
	FormatAnthropic ErrorFormat = "anthropic"
)

// MaxRetryAfterMax bounds retryAfterMax.
const MaxRetryAfterMax = 24 * time.Hour

// Refusal says how a limit's refusals are written. The zero value sets
// nothing: the gateway's own body and the true Retry-After.
type Refusal struct {
	// Format is the body's shape; "" when not set.
	Format ErrorFormat
	// RetryAfterMax caps the Retry-After header and retryAfterSeconds
	// of a refusal, in whole seconds; 0 for no cap. The RateLimit
	// fields and the usage API keep the true reset.
	RetryAfterMax time.Duration
}

// Or returns r with what it does not set taken from base.
func (r Refusal) Or(base Refusal) Refusal {
	if r.Format == "" {
		r.Format = base.Format
	}
	if r.RetryAfterMax == 0 {
		r.RetryAfterMax = base.RetryAfterMax
	}
	return r
}

// refusal reads errorFormat and retryAfterMax from fs.
func (p *parser) refusal(fs map[string]field) (Refusal, bool) {
	var r Refusal
	ok := true
	if f, set := fs["errorFormat"]; set {
		s, good := p.str(f)
		switch v := ErrorFormat(s); {
		case !good:
			ok = false
		case v == FormatDefault || v == FormatOpenAI || v == FormatAnthropic:
			r.Format = v
		default:
			p.errorf(f.line, "errorFormat %q is not one of openai, anthropic, default; it is the shape of the body of a refusal", s)
			ok = false
		}
	}
	if f, set := fs["retryAfterMax"]; set {
		d, good := p.duration(f)
		switch {
		case !good:
			ok = false
		case d < time.Second || d > MaxRetryAfterMax || d%time.Second != 0:
			p.errorf(f.line, "retryAfterMax %q must be whole seconds from 1s to %s; Retry-After is sent in seconds", f.val.Value, MaxRetryAfterMax)
			ok = false
		default:
			r.RetryAfterMax = d
		}
	}
	return r, ok
}
