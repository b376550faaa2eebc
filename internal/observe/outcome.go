package observe

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Observer receives the outcome of every request, once, when its response
// is done; metrics and access logs hang here. Implementations must be
// safe for concurrent use and fast, and must not keep o after they
// return: it is reused.
type Observer interface {
	ObserveRequest(o *Outcome)
}

// MaxLimits is how many limits one request can meet: the app total and
// one API rule.
const MaxLimits = 2

// Outcome is what the gateway did with one request, and what the request
// was decided on, for an Observer. The request path fills it in; the zero
// value is an empty outcome.
type Outcome struct {
	// App is the metrics label of the caller: its configured app ID, or
	// "*" for every other caller (unknown, or rejected as invalid).
	App string
	// AppID is the app ID the caller sent, if it was valid ("" if none).
	AppID string
	// API is the matched rule pattern, "" if none.
	API string
	// Route and Upstream name the route the request took and its
	// upstream; "" when it went to --upstream or was refused before.
	Route, Upstream string
	// Method is the request's method as the client sent it.
	Method string
	// Path is the normalized path that was matched and forwarded; "" if
	// the request was rejected before.
	Path string
	// ClientIP is the caller's address (see docs/security.md, "Security"); invalid
	// for a request refused before its path was matched.
	ClientIP netip.Addr
	// Claims are the caller's verified token's claims (replay's logged
	// ones), read by the app claim and claim keys; nil without a token.
	Claims *jwtauth.Claims
	// Decision is what the limiter decided.
	Decision Decision
	// Status is the response status (499 when the client went away).
	Status int
	// Start is when the request reached the handler.
	Start time.Time
	// Duration is the whole request's time in the gateway.
	Duration time.Duration
	// LimiterDuration is the time the store took to decide (0 if it was
	// not asked).
	LimiterDuration time.Duration
	// StoreError reports whether the store failed.
	StoreError bool
	// UpstreamDuration is the time spent forwarding (0 if not forwarded).
	UpstreamDuration time.Duration
	// UpstreamCost is the cost the upstream reported in a limit's cost
	// header (docs/rules.md, "Request cost"), as it sent it, before any
	// cap; valid when HasUpstreamCost.
	UpstreamCost    int64
	HasUpstreamCost bool
	// ChargeError reports whether charging the response's cost failed.
	ChargeError bool
	// Span is the request's server span when it is traced and recording
	// (docs/operations.md, "Traces"), nil otherwise: observers add to it
	// (package tracing) or link to it (the metrics' exemplars).
	Span trace.Span

	limits [MaxLimits]LimitOutcome
	n      int
	// keys are the values of the key parts the request's limits count
	// by, in the order the limits and their parts come, each part once:
	// in keyBuf, or in more once keyBuf is full.
	keyBuf [4]KeyValue
	nk     int
	more   []KeyValue
}

// LimitOutcome is one limit's part in a decision.
type LimitOutcome struct {
	App, API  string
	Limit     int64
	Remaining int64
	Allowed   bool
	Shadow    bool
	// By is what the limit's counters are shared by.
	By config.By
	// Key is the request's counter of the limit as the operator wrote
	// it: "" for by app and global (the limit has one counter); the
	// client address group for by ip, or for a missing value under
	// missing: ip; the header or query value for a keyed limit, raw (not
	// escaped as in the counter key), with the values of a combination
	// joined by ", " and a value missing under missing: share as "".
	// It may be as long as the values allowed: observers bound what they
	// keep.
	Key string
	// Missing reports whether Key is the client address group of a
	// request that lacked the value the limit counts by (missing: ip),
	// which Key alone cannot tell from a value that is an address.
	Missing bool
	// Charged is the number of units counted against a limit that sets
	// cost or count (docs/rules.md, "Request cost"): its fixed cost when
	// the request was admitted, or what its response was charged; 0 when
	// nothing was counted, and for limits without cost or count.
	Charged int64
	// CostMissing reports whether the limit's cost header was missing
	// from the response or not a whole number ≥ 0, so that its min was
	// charged.
	CostMissing bool
	// Tokens reports whether the limit's cost is read from the response
	// body (LLM tokens); Plan is the plan its rule comes from.
	Tokens bool
	Plan   string
	// Priced reports whether the limit's cost is the price of the tokens
	// (cost: {price: ...}): Charged is then money, in micro-units, and
	// InputTokens and OutputTokens are the tokens the response reported.
	Priced                    bool
	InputTokens, OutputTokens int64
	// Alerts are the limit's alert thresholds (percentages of Limit,
	// ascending), Params its parameters; nil for a limit without alerts.
	Alerts []int
	Params *limit.Params
	// Deferred reports whether the limit counts the request once its
	// response is known: Remaining is then what was left before the
	// charge, less Reserved, the units the request held meanwhile.
	Deferred bool
	Reserved int64
}

// KeyValue is the value of one key part (a header, a query parameter or
// a claim) that a request's limits count by, as the request path read it.
type KeyValue struct {
	Part config.KeyPart
	// Value is the part's value, "" if it was absent or empty.
	Value string
	// Bad is why the value cannot be counted by ("is sent more than
	// once"), "" if it can.
	Bad string
}

// Limits returns the limits the request was decided against. The request
// path updates them in place (what a response was charged).
func (o *Outcome) Limits() []LimitOutcome { return o.limits[:o.n] }

// AddLimit appends l to the limits the request was decided against; at
// most MaxLimits.
func (o *Outcome) AddLimit(l LimitOutcome) {
	o.limits[o.n] = l
	o.n++
}

// ResetLimits empties the limits, for a request decided again (after
// waiting for room).
func (o *Outcome) ResetLimits() { o.n = 0 }

// Cost returns the units counted for the request against its most
// specific limit (its rule, else its app's total), 0 when none counted
// it.
func (o *Outcome) Cost() int64 {
	if o.n == 0 {
		return 0
	}
	return o.limits[o.n-1].Charged
}

// ClaimValue looks up a claim of the caller's verified token, or why it
// cannot be counted by: "" without a token.
func (o *Outcome) ClaimValue(name string) (string, string) {
	if o.Claims == nil {
		return "", ""
	}
	return o.Claims.Value(name)
}

// Keys returns the values of the key parts the request's limits count
// by, each part once.
func (o *Outcome) Keys() []KeyValue {
	if o.more != nil {
		return o.more
	}
	return o.keyBuf[:o.nk]
}

// Key returns the value of part p, and whether it was read.
func (o *Outcome) Key(p config.KeyPart) (KeyValue, bool) {
	for _, kv := range o.Keys() {
		if kv.Part == p {
			return kv, true
		}
	}
	return KeyValue{}, false
}

// AttrValue returns the value of part p as the request path read it, or
// why it cannot be counted by (ruleset.Values).
func (o *Outcome) AttrValue(p config.KeyPart) (string, string) {
	kv, _ := o.Key(p)
	return kv.Value, kv.Bad
}

// AddKey records the value of a key part, read once by the request path.
func (o *Outcome) AddKey(kv KeyValue) {
	switch {
	case o.more != nil:
		o.more = append(o.more, kv)
	case o.nk < len(o.keyBuf):
		o.keyBuf[o.nk] = kv
		o.nk++
	default:
		o.more = append(slices.Clone(o.keyBuf[:]), kv)
	}
}

// Decision is what the gateway did with a request: the decision label of
// the request metrics and of the access log (docs/operations.md, "Metrics").
type Decision uint8

// The decisions.
const (
	DecisionAllowed Decision = iota
	DecisionLimited
	DecisionShadowLimited
	DecisionUnmatched
	DecisionInvalid
	DecisionFailOpen
	DecisionFailClosed
	// DecisionUnauthorized is a caller refused before any limit: an app
	// with keys named without one of them (401), or an unknown caller
	// under --unknown-callers reject (403).
	DecisionUnauthorized
	// DecisionConcurrencyLimited is a request refused because its
	// caller had as many requests in flight as a concurrency limit
	// allows (429 too_many_in_flight).
	DecisionConcurrencyLimited
	// DecisionOverloaded is a request refused because the bodies read
	// for keys held the most memory the gateway gives them (503
	// body_memory_full).
	DecisionOverloaded
	// NumDecisions is the number of decisions.
	NumDecisions
)

var decisionNames = [NumDecisions]string{
	"allowed", "limited", "shadow_limited", "unmatched",
	"invalid", "fail_open", "fail_closed", "unauthorized",
	"concurrency_limited", "overloaded",
}

// String returns the decision's label, e.g. "shadow_limited".
func (d Decision) String() string {
	if d < NumDecisions {
		return decisionNames[d]
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// MarshalText returns the decision's label.
func (d Decision) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// ParseDecision returns the decision whose label is s.
func ParseDecision(s string) (Decision, bool) {
	for i, name := range decisionNames {
		if name == s {
			return Decision(i), true
		}
	}
	return 0, false
}
