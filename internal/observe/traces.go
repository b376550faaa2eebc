package observe

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// Traces writes each traced request's outcome on its server span
// (Outcome.Span): the decision, the caller as the access log writes it
// (app, app ID, client address, the values its limits counted by, hashed
// unless raw), the status; and names the span after the matched rule.
// The zero value hashes without a secret, as tests do; it is safe for
// concurrent use.
type Traces struct {
	// RawKeys writes the values of keyed limits as they are
	// (--access-log-keys).
	RawKeys bool
	// Hasher hashes them as the access log and /top do: under the
	// secret of --key-hash-secret-file, so that a trace backend, which
	// more people read than the gateway's logs, cannot undo a hash of a
	// short value by hashing every likely one (KeyHasher).
	Hasher *KeyHasher
}

// ObserveRequest implements Observer; requests without a recording span
// are left alone.
func (t *Traces) ObserveRequest(o *Outcome) {
	s := o.Span
	if s == nil || !s.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	if o.API != "" {
		// The HTTP conventions' "{method} {http.route}": a rule pattern
		// is bounded by the rule file, as a route template is.
		s.SetName(o.Method + " " + o.API)
		attrs = append(attrs, attribute.String("http.route", o.API))
	}
	attrs = append(attrs,
		attribute.String(tracing.AttrDecision, o.Decision.String()),
		attribute.String(tracing.AttrApp, o.App),
	)
	if o.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", o.Status))
	}
	if o.AppID != "" {
		attrs = append(attrs, attribute.String(tracing.AttrAppID, o.AppID))
	}
	if o.ClientIP.IsValid() {
		attrs = append(attrs, attribute.String("client.address", o.ClientIP.String()))
	}
	if o.Path != "" {
		attrs = append(attrs, attribute.String("url.path", o.Path))
	}
	if o.Route != "" {
		attrs = append(attrs, attribute.String(tracing.AttrRoute, o.Route), attribute.String(tracing.AttrUpstream, o.Upstream))
	}
	for _, kv := range o.Keys() {
		if kv.Value == "" || kv.Bad != "" {
			continue
		}
		if t.RawKeys {
			attrs = append(attrs, attribute.String(tracing.AttrKey+kv.Part.String(), kv.Value))
		} else {
			attrs = append(attrs, attribute.String(tracing.AttrKeyHash+kv.Part.String(), t.Hasher.Hash(kv.Value)))
		}
	}
	s.SetAttributes(attrs...)
	if o.Status >= 500 {
		s.SetStatus(codes.Error, "")
	}
}

var _ Observer = (*Traces)(nil)
