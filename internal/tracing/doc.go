// Package tracing exports OpenTelemetry traces of `gateway serve` and
// `gateway rls` over OTLP (gRPC or HTTP) with the official Go SDK,
// configured by the SDK's standard environment (OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_*, OTEL_TRACES_SAMPLER, OTEL_PROPAGATORS,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and, for rls,
// envoyproxy/ratelimit's TRACING_* variables (docs/operations.md,
// "Traces"). It builds the tracer provider, the propagators, the server
// span of each proxied request and the attributes of the gateway's
// decisions.
//
// It must never slow or fail a request: spans go to a bounded queue that
// drops (and counts) what does not fit while the receiver is down or slow,
// and exporting happens off the request path. It must not decide
// anything, and it writes caller-identifying values only as the access
// log does (hashed unless configured). It must not import the request
// path (package proxy) or the process (server, rls).
package tracing
