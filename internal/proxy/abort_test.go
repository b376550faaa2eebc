package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// abortRig is a gateway whose upstream answers a request only once the
// gateway has seen its client hang up, over real servers: the request is
// aborted for certain before any answer.
type abortRig struct {
	g    *gw
	url  string
	mu   sync.Mutex
	saw  map[string]chan struct{} // closed when the gateway saw the abort
	came map[string]chan struct{} // closed when the upstream got the request
}

func (a *abortRig) chans(id string) (saw, came chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.saw[id] == nil {
		a.saw[id], a.came[id] = make(chan struct{}), make(chan struct{})
	}
	return a.saw[id], a.came[id]
}

func newAbortRig(t *testing.T, rules string) *abortRig {
	t.Helper()
	a := &abortRig{saw: map[string]chan struct{}{}, came: map[string]chan struct{}{}}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Test-Id"); id != "" {
			saw, came := a.chans(id)
			close(came)
			select {
			case <-saw: // the client is gone; the upstream still answers
			case <-r.Context().Done():
				return // the gateway gave up on it
			}
		}
		switch r.URL.Path {
		case "/v1/report":
			w.Header().Set("X-RateLimit-Cost", "50")
			fmt.Fprint(w, "report")
		case "/v1/login":
			w.WriteHeader(http.StatusUnauthorized)
		case "/v1/broken":
			// No answer at all.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}))
	t.Cleanup(up.Close)
	a.g = newGWWith(t, rules, up.URL, nil)
	gwSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Test-Id"); id != "" {
			saw, _ := a.chans(id)
			stop := context.AfterFunc(r.Context(), func() { close(saw) })
			defer func() {
				if stop() { // the handler returned before any abort
					close(saw)
				}
			}()
		}
		a.g.h.ServeHTTP(w, r)
	}))
	t.Cleanup(gwSrv.Close)
	a.url = gwSrv.URL
	return a
}

// abort sends a request and hangs up once the upstream has it, then
// waits for the gateway's outcome of it.
func (a *abortRig) abort(t *testing.T, path, id string, n int) observe.Outcome {
	t.Helper()
	_, came := a.chans(id)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "GET", a.url+path, nil)
	r.Header.Set("X-App-Id", "app-1")
	r.Header.Set("X-Test-Id", id)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(r)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-came:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the request never reached the upstream", id)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("%s: the client got a response though it hung up first", id)
	}
	// Requests are sent one at a time: the nth outcome is this one's.
	a.g.obs.waitFor(t, n)
	a.g.obs.mu.Lock()
	defer a.g.obs.mu.Unlock()
	return a.g.obs.out[n-1]
}

// TestAbortedRequestIsChargedWhatItCost checks that a client hanging up
// does not lower what its request is charged: the upstream's reported
// cost when it still answers, the limit's worst case (cost max) when it
// does not, and a count of the matching status the upstream answered.
func TestAbortedRequestIsChargedWhatItCost(t *testing.T) {
	t.Parallel()
	a := newAbortRig(t, `
configs:
  - appId: app-1
    limits:
      - api: /v1/report
        limit: 1000
        unit: 1h
        cost: {header: X-RateLimit-Cost, max: 200}
      - api: /v1/broken
        limit: 1000
        unit: 1h
        cost: {header: X-RateLimit-Cost, max: 200}
      - api: /v1/login
        limit: 3
        unit: 1h
        count: {status: [401]}
`)
	n := 0
	for i := range 2 {
		n++
		o := a.abort(t, "/v1/report", fmt.Sprint("report-", i), n)
		if got := o.Cost(); got != 50 {
			t.Errorf("report %d: charged %d, want the 50 the upstream reported (status %d)", i, got, o.Status)
		}
	}
	n++
	if o := a.abort(t, "/v1/broken", "broken", n); o.Cost() != 200 {
		t.Errorf("no answer: charged %d, want the rule's max 200 (status %d)", o.Cost(), o.Status)
	}
	for i := range 3 {
		n++
		o := a.abort(t, "/v1/login", fmt.Sprint("login-", i), n)
		if got := o.Cost(); got != 1 {
			t.Errorf("login %d: counted %d, want 1: the upstream answered 401 (status %d)", i, got, o.Status)
		}
	}
	// Three 401s were counted: the next login attempt is limited.
	if w := a.g.do("GET", "/v1/login", "app-1"); w.Code != http.StatusTooManyRequests {
		t.Errorf("login after three counted 401s: got %d, want 429", w.Code)
	}
}
