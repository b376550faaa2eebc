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

// gatedStore counts the calls made to its store, and holds a call that
// charges until gate is closed.
type gatedStore struct {
	limit.Store
	calls atomic.Int64
	gate  chan struct{}
}

func (s *gatedStore) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	s.calls.Add(1)
	for _, q := range reqs {
		if q.Act == limit.Charge {
			<-s.gate
			break
		}
	}
	return s.Store.Allow(ctx, now, reqs, res)
}

// TestChargeAfterHeaders: the cost a response's header reports is
// charged, in one store call with the release of what the request held,
// without holding the response back: the client has the headers and the
// first bytes of the body while the store has not answered the charge,
// and the request is done, its charge recorded, once it has.
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
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-RateLimit-Cost", "40")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("first;"))
		http.NewResponseController(w).Flush()
		w.Write([]byte("rest"))
	}))
	t.Cleanup(up.Close)
	store := &gatedStore{gate: make(chan struct{})}
	g := newGWWith(t, rules, up.URL, &upstreamRecorder{}, func(h *HandlerConfig, _ *UpstreamConfig) {
		store.Store = h.Store
		h.Store = store
	})
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	// Registered after the server's Close, so run before it: a handler
	// held in the charge would keep Close waiting.
	t.Cleanup(func() {
		select {
		case <-store.gate:
		default:
			close(store.gate)
		}
	})

	// Generous: a gateway that charged before the headers would never
	// answer while the charge is held.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/complete", nil)
	req.Header.Set("X-App-Id", "app-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("no response while the charge is held: %v", err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("X-RateLimit-Cost"); got != "" {
		t.Errorf("the cost header reached the client: %q", got)
	}
	first := make([]byte, len("first;"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first;" {
		t.Fatalf("first bytes while the charge is held: got %q, %v", first, err)
	}
	if n := g.obs.count(); n != 0 {
		t.Errorf("the request was observed done (%d) before its charge was answered", n)
	}
	close(store.gate)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "rest" {
		t.Fatalf("rest of the body: got %q, %v; want rest", rest, err)
	}
	g.obs.waitFor(t, 1)
	o := g.obs.last()
	if got := o.Limits()[0].Charged; got != 40 || o.ChargeError {
		t.Errorf("charged %d (charge error %v), want 40", got, o.ChargeError)
	}
	if got := store.calls.Load(); got != 2 {
		t.Errorf("store calls: got %d, want 2 (the decision, then the charge with the release)", got)
	}
	// The charge is counted: 1000 - 40 left, less the min of 10 the next
	// request holds itself.
	w := g.do("GET", "/v1/complete", "app-1")
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "950" {
		t.Errorf("remaining after the charge: got %s, want 950", got)
	}
}
