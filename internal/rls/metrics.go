package rls

import (
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// outcome is what became of one descriptor, as the metrics label it.
type outcome uint8

const (
	outOK outcome = iota + 1
	outOverLimit
	outShadow // denied by a shadow_mode limit, reported OK
	outUnlimited
	outReplaced
	outNoLimit
	outFailOpen
	outFailClosed
	outFailLocal
)

var outcomeNames = [...]string{"", "ok", "over_limit", "shadow_over_limit", "unlimited", "replaced", "no_limit", "fail_open", "fail_closed", "fail_local"}

func (o outcome) String() string { return outcomeNames[o] }

// Label values the metrics use in place of unbounded ones.
const (
	// unknownDomain labels requests for a domain not in the config:
	// domains come from the callers, so they are not labels.
	unknownDomain = "(unknown)"
	// overrideLabel labels descriptors with a limit override from Envoy.
	overrideLabel = "(override)"
)

// metricLabel returns the descriptor label of a match: the configured
// path, or with detailed_metric the request's keys and values.
func metricLabel(d *rlsconfig.Descriptor, es []rlsconfig.Entry) string {
	if !d.DetailedMetric {
		return d.Path
	}
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
