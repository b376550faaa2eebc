package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// countingStore counts the calls made to its store.
type countingStore struct {
	limit.Store
	calls atomic.Int64
}

func (s *countingStore) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	s.calls.Add(1)
	return s.Store.Allow(ctx, now, reqs, res)
}

// TestChargeAfterHeaders: the cost a response's header reports is
// charged once the response has ended, in one store call with the
// release of what the request held, and never between the upstream's
// headers and the client: when the client has the headers, the store has
// been asked only the decision.
func TestChargeAfterHeaders(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/complete
        limit: 1000
        unit: 1h
        cost: {header: X-RateLimit-Cost, max: 500, min: 10}
`
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-RateLimit-Cost", "40")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("first;"))
		http.NewResponseController(w).Flush()
		<-gate
		w.Write([]byte("rest"))
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	var counting *countingStore
	g := newGWWith(t, rules, up.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		counting = &countingStore{Store: h.Store}
		h.Store = counting
	})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/complete", nil)
	req.Header.Set("X-App-Id", "app-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The upstream holds its body back until gate is closed: the client
	// has the headers, and the response has not ended.
	if got := counting.calls.Load(); got != 1 {
		t.Errorf("store calls when the client has the headers: got %d, want 1 (the decision only)", got)
	}
	if got := resp.Header.Get("X-RateLimit-Cost"); got != "" {
		t.Errorf("the cost header reached the client: %q", got)
	}
	close(gate)
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "first;rest" {
		t.Fatalf("body: got %q, %v; want first;rest", body, err)
	}
	g.obs.waitFor(t, 1)
	o := g.obs.last()
	if got := o.Limits()[0].Charged; got != 40 || o.ChargeError {
		t.Errorf("charged %d (charge error %v), want 40", got, o.ChargeError)
	}
	if got := counting.calls.Load(); got != 2 {
		t.Errorf("store calls once the response ended: got %d, want 2 (the decision, then the charge with the release)", got)
	}
	// The charge is counted: 1000 - 40 left, less the min of 10 the next
	// request holds itself.
	w := g.do("GET", "/v1/complete", "app-1")
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "950" {
		t.Errorf("remaining after the charge: got %s, want 950", got)
	}
}
