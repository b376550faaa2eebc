package proxy

import "github.com/ratelimit-gateway/gateway/internal/observe"

// The handler reports to observers (package observe) through these; the
// names stay in proxy for its callers (replay, the tests).
type (
	// Observer receives the outcome of every request.
	Observer = observe.Observer
	// Outcome is what the handler did with one request.
	Outcome = observe.Outcome
	// LimitOutcome is one limit's part in a decision.
	LimitOutcome = observe.LimitOutcome
	// Decision is what the gateway did with a request.
	Decision = observe.Decision
)

// The decisions (observe.Decision).
const (
	DecisionAllowed            = observe.DecisionAllowed
	DecisionLimited            = observe.DecisionLimited
	DecisionShadowLimited      = observe.DecisionShadowLimited
	DecisionUnmatched          = observe.DecisionUnmatched
	DecisionInvalid            = observe.DecisionInvalid
	DecisionFailOpen           = observe.DecisionFailOpen
	DecisionFailClosed         = observe.DecisionFailClosed
	DecisionUnauthorized       = observe.DecisionUnauthorized
	DecisionConcurrencyLimited = observe.DecisionConcurrencyLimited
)

// ruleLabels name one limit: an app and a rule pattern ("" for the app's
// own).
type ruleLabels struct{ app, api string }
