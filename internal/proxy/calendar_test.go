package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCalendarHeaders checks that a calendar-day limit's headers count
// down to local midnight, that it fills at 23:59:59 and is free at
// 00:00:00 local, and that its 429 names the unit.
func TestCalendarHeaders(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/report
        limit: 2
        unit: calendar-day
        timezone: Europe/Berlin
`)
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at      time.Time
		status  int
		headers map[string]string
	}{
		{at: time.Date(2026, 3, 28, 23, 59, 58, 0, ber), status: 200, headers: map[string]string{
			"RateLimit-Policy": `"app-1/v1/report";q=2;w=86400`, "RateLimit": `"app-1/v1/report";r=1;t=2`,
			"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "2",
		}},
		{at: time.Date(2026, 3, 28, 23, 59, 59, 0, ber), status: 200, headers: map[string]string{
			"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
		}},
		{at: time.Date(2026, 3, 28, 23, 59, 59, 500_000_000, ber), status: 429, headers: map[string]string{
			"Retry-After": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
		}},
		// Midnight starts a day of 23 hours (daylight-saving time).
		{at: time.Date(2026, 3, 29, 0, 0, 0, 0, ber), status: 200, headers: map[string]string{
			"RateLimit": `"app-1/v1/report";r=1;t=82800`, "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "82800",
		}},
	}
	for i, s := range steps {
		g.clock.Set(s.at)
		w := g.do("GET", "/v1/report", "app-1")
		if w.Code != s.status {
			t.Fatalf("step %d (%v): status %d, want %d", i, s.at, w.Code, s.status)
		}
		for k, want := range s.headers {
			if got := w.Header().Get(k); got != want {
				t.Errorf("step %d (%v): %s: got %q, want %q", i, s.at, k, got, want)
			}
		}
		if w.Code == 429 {
			var body map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("429 body: %v: %s", err, w.Body)
			}
			if body["window"] != "calendar-day" || body["retryAfterSeconds"] != 1.0 {
				t.Errorf("step %d: 429 body %s, want window calendar-day and retryAfterSeconds 1", i, w.Body)
			}
		}
	}
	out, err := g.h.Rules().Explain("app-1", "GET", "/v1/report")
	if err != nil {
		t.Fatal(err)
	}
	if want := "2 per calendar-day (fixed_window, in Europe/Berlin)"; !strings.Contains(out, want) {
		t.Errorf("Explain: got\n%s\nwant it to contain %q", out, want)
	}
}
