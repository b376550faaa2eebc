package rls

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
)

// Call is one ShouldRateLimit call as observers see it. Observers must
// not modify it or keep it past ObserveCall.
type Call struct {
	// Start is when the call was decided; Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Peer is the caller's address, "" if unknown.
	Peer     string
	Request  *rlsv3.RateLimitRequest
	Response *rlsv3.RateLimitResponse // nil when Err is not
	// Err is why the call was refused (an invalid request) or failed.
	Err error
	// Span is the call's server span when it is traced and recording,
	// else nil.
	Span trace.Span
	// ds are the descriptors' decisions, nil when Err is not.
	ds []decision
}

// Observer sees every call once it is answered. ObserveCall runs on the
// call's goroutine, so it must be quick and safe for concurrent use.
type Observer interface {
	ObserveCall(c *Call)
}
