package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// TestStoreErrorsLoggedOnceASecond checks that an outage of the store,
// which fails every request, is logged once a second: the first error at
// once, then none until a second has passed. The bubble's clock stands
// still between requests.
func TestStoreErrorsLoggedOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parsed, err := config.Parse("rules.yaml", []byte(basicRules))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ruleset.Compile(parsed, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var logs gwtest.Log
		h, err := NewHandler(HandlerConfig{
			Rules: rs, Store: failingStore{}, Upstream: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		send := func(n int) {
			for range n {
				r := httptest.NewRequest("GET", "/v1/user", nil)
				r.Header.Set("X-App-Id", "app-2")
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
		for _, step := range []struct {
			after time.Duration // slept before the requests
			n     int
			want  int // lines logged so far
		}{
			{0, 5, 1},
			{999 * time.Millisecond, 5, 1},
			{time.Millisecond, 5, 2},
			{500 * time.Millisecond, 1, 2},
			{2 * time.Second, 1, 3},
		} {
			time.Sleep(step.after)
			send(step.n)
			if got := strings.Count(logs.String(), "limiter failed"); got != step.want {
				t.Fatalf("after %s more: %d lines logged, want %d", step.after, got, step.want)
			}
		}
	})
}
