package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestRetryAfterAdmitsEveryAlgorithm checks, through the handler, that
// for every algorithm a limited request gets a Retry-After of at least
// 1s that is true: a client that waits exactly that many whole seconds is
// admitted, and one that comes back a second earlier is not.
func TestRetryAfterAdmitsEveryAlgorithm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		settings string // the rule's settings besides api, limit and unit, as a flow mapping
		every    time.Duration
	}{
		{name: "sliding_window", settings: "{algorithm: sliding_window}", every: 700 * time.Millisecond},
		{name: "sliding_window precision 3", settings: "{algorithm: sliding_window, precision: 3}", every: 1300 * time.Millisecond},
		{name: "fixed_window", settings: "{algorithm: fixed_window}", every: 700 * time.Millisecond},
		{name: "sliding_log", settings: "{algorithm: sliding_log}", every: 900 * time.Millisecond},
		{name: "token_bucket", settings: "{algorithm: token_bucket}", every: 300 * time.Millisecond},
		{name: "token_bucket burst 1", settings: "{algorithm: token_bucket, burst: 1}", every: 1100 * time.Millisecond},
		{name: "token_bucket warmup", settings: "{algorithm: token_bucket, burst: 2, warmup: 20s}", every: 1700 * time.Millisecond},
		{name: "leaky_bucket", settings: "{algorithm: leaky_bucket, burst: 4}", every: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 3
        unit: 10
        <<: `+tt.settings+`
`)
			// Send every tt.every until one is limited.
			at := t0
			var w429 *httptest.ResponseRecorder
			for i := 0; i < 100 && w429 == nil; i++ {
				g.clock.Set(at)
				if w := g.do("GET", "/v1/user", "app-1"); w.Code == http.StatusTooManyRequests {
					w429 = w
					break
				} else if w.Code != http.StatusOK {
					t.Fatalf("request %d at t0+%v: got %d, want 200 or 429", i, at.Sub(t0), w.Code)
				}
				at = at.Add(tt.every)
			}
			if w429 == nil {
				t.Fatal("no request was limited")
			}
			secs, err := strconv.Atoi(w429.Header().Get("Retry-After"))
			if err != nil || secs < 1 {
				t.Fatalf("Retry-After at t0+%v: got %q, want whole seconds ≥ 1", at.Sub(t0), w429.Header().Get("Retry-After"))
			}
			var body struct {
				RetryAfterSeconds int `json:"retryAfterSeconds"`
			}
			if err := json.Unmarshal(w429.Body.Bytes(), &body); err != nil || body.RetryAfterSeconds != secs {
				t.Errorf("body retryAfterSeconds: got %d (%v), want %d", body.RetryAfterSeconds, err, secs)
			}
			if got := w429.Header().Get("X-RateLimit-Remaining"); got != "0" {
				t.Errorf("X-RateLimit-Remaining of the 429: got %q, want 0", got)
			}

			g.clock.Set(at.Add(time.Duration(secs-1) * time.Second))
			if w := g.do("GET", "/v1/user", "app-1"); w.Code != http.StatusTooManyRequests {
				t.Errorf("1s before Retry-After %ds (limited at t0+%v): got %d, want 429", secs, at.Sub(t0), w.Code)
			}
			g.clock.Set(at.Add(time.Duration(secs) * time.Second))
			if w := g.do("GET", "/v1/user", "app-1"); w.Code != http.StatusOK {
				t.Errorf("after Retry-After %ds (limited at t0+%v): got %d, want 200", secs, at.Sub(t0), w.Code)
			}
		})
	}
}

// TestLockSeconds checks the penalty lockout (lockSeconds) through the
// handler: once limited, a caller stays limited on that rule for
// lockSeconds even when the algorithm would admit it again, with a true
// Retry-After; its other rules are not locked.
func TestLockSeconds(t *testing.T) {
	t.Parallel()
	g := newGW(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/login
        algorithm: fixed_window
        limit: 2
        unit: 10
        lockSeconds: 60
      - api: /v1/user
        limit: 5
        unit: 10
`)
	tests := []struct {
		name       string
		at         time.Duration
		path       string
		status     int
		retryAfter string
	}{
		{name: "first", at: 0, path: "/v1/login", status: 200},
		{name: "second", at: time.Second, path: "/v1/login", status: 200},
		{name: "limited: locked for 60s", at: 2 * time.Second, path: "/v1/login", status: 429, retryAfter: "60"},
		{name: "other rules are not locked", at: 3 * time.Second, path: "/v1/user", status: 200},
		{name: "a new window would admit", at: 10 * time.Second, path: "/v1/login", status: 429, retryAfter: "52"},
		{name: "retrying does not extend the lock", at: 61 * time.Second, path: "/v1/login", status: 429, retryAfter: "1"},
		{name: "after the lock", at: 62 * time.Second, path: "/v1/login", status: 200},
	}
	for _, tt := range tests {
		// Sequential: the steps share the gateway's counters.
		g.clock.Set(t0.Add(tt.at))
		w := g.do("POST", tt.path, "app-1")
		if w.Code != tt.status {
			t.Errorf("%s: POST %s at t0+%v: got %d, want %d", tt.name, tt.path, tt.at, w.Code, tt.status)
		}
		if got := w.Header().Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("%s: Retry-After: got %q, want %q", tt.name, got, tt.retryAfter)
		}
	}
}
