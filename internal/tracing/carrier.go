package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier is propagation.HeaderCarrier for the headers the
// propagators read and write, whose lowercase names it maps to their
// canonical form without net/textproto's canonicalization, which
// allocates a new string on every call for a name it does not know: on
// every request, traced or not, for the reads and the writes of the
// trace context.
type HeaderCarrier http.Header

// canonical are the canonical forms of the propagators' header names.
var canonical = map[string]string{
	"traceparent": "Traceparent", "tracestate": "Tracestate", "baggage": "Baggage",
	"b3": "B3", "x-b3-traceid": "X-B3-Traceid", "x-b3-spanid": "X-B3-Spanid",
	"x-b3-sampled": "X-B3-Sampled", "x-b3-flags": "X-B3-Flags", "x-b3-parentspanid": "X-B3-Parentspanid",
}

func canonicalKey(key string) string {
	if c, ok := canonical[key]; ok {
		return c
	}
	return http.CanonicalHeaderKey(key)
}

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if vs := h[canonicalKey(key)]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set sets key to value alone.
func (h HeaderCarrier) Set(key, value string) { h[canonicalKey(key)] = []string{value} }

// Keys returns the header names.
func (h HeaderCarrier) Keys() []string { return propagation.HeaderCarrier(h).Keys() }

var _ propagation.TextMapCarrier = HeaderCarrier(nil)
