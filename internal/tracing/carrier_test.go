package tracing

import (
	"net/http"
	"testing"
)

// TestHeaderCarrier: every name the carrier maps itself is the one
// net/http would canonicalize it to, and the carrier reads and writes
// the headers as http.Header does.
func TestHeaderCarrier(t *testing.T) {
	t.Parallel()
	for lower, c := range canonical {
		if want := http.CanonicalHeaderKey(lower); c != want {
			t.Errorf("canonical %q: got %q, want %q", lower, c, want)
		}
		h := http.Header{}
		HeaderCarrier(h).Set(lower, "v")
		if got := h.Get(lower); got != "v" {
			t.Errorf("Set %q: http.Header.Get: got %q, want v", lower, got)
		}
		h.Set(lower, "w")
		if got := HeaderCarrier(h).Get(lower); got != "w" {
			t.Errorf("Get %q: got %q, want w", lower, got)
		}
	}
	h := http.Header{"X-Other": {"x"}}
	if got := HeaderCarrier(h).Get("x-other"); got != "x" {
		t.Errorf("Get of another header: got %q, want x", got)
	}
	if got := HeaderCarrier(h).Get("traceparent"); got != "" {
		t.Errorf("Get of a missing header: got %q, want empty", got)
	}
}
