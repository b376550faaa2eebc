package main

import (
	"os"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

const tracingUsage = "export OpenTelemetry traces over OTLP, as OTEL_TRACES_EXPORTER=otlp does; the receiver, protocol, sampler and propagators come from the standard OTEL_ environment (docs/operations.md, \"Traces\")"

// tracingFromEnv sets *c from the OpenTelemetry environment (and for rls
// envoyproxy/ratelimit's TRACING_ variables), with tracing on when on
// (--tracing) whatever the environment says.
func tracingFromEnv(c *tracing.Config, service string, rls, on bool) error {
	tc, err := tracing.FromEnv(os.Getenv, service, rls)
	if err != nil {
		return usageError{err}
	}
	tc.Enabled = tc.Enabled || on
	*c = tc
	return nil
}
