package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestCountInFlight sends 40 parallel login attempts against count:
// {status: [401]} with a limit of 5, on both stores: each request in
// flight is counted provisionally, so at most 5 reach the upstream while
// none is answered. Answered 401, they are counted; answered 200, they
// give their unit back.
func TestCountInFlight(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, srv *redistest.Server) {
		for _, status := range []int{http.StatusUnauthorized, http.StatusOK} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				testCountInFlight(t, store, srv, status)
			})
		}
	})
}

func testCountInFlight(t *testing.T, store string, srv *redistest.Server, status int) {
	const n, lim = 40, 5
	app := fmt.Sprintf("app-%s-%d", store, status)
	events := make(chan string, 2*n)
	release := make(chan struct{})
	var arrived atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			arrived.Add(1)
			events <- "arrived"
			<-release
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(up.Close)
	rules := `
configs:
  - appId: ` + app + `
    limits:
      - api: /login
        limit: 5
        unit: 1h
        lockSeconds: 3600
        count: {status: [401]}
`
	g := newGWWith(t, rules, up.URL, nil, func(h *HandlerConfig, _ *UpstreamConfig) {
		if store == "redis" {
			red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second, DenyCacheSize: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { red.Close() })
			h.Store, h.FailMode = red, failmode.Closed
		}
	})
	gwSrv := httptest.NewServer(g.h)
	t.Cleanup(gwSrv.Close)
	send := func(query string) int {
		r, _ := http.NewRequest("GET", gwSrv.URL+"/login?"+query, nil)
		r.Header.Set("X-App-Id", app)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = send("hold=1")
			if codes[i] != status {
				events <- "refused"
			}
		}()
	}
	// Every request is either at the upstream or refused before any is
	// answered.
	deadline := time.After(60 * time.Second)
	for range n {
		select {
		case <-events:
		case <-deadline:
			close(release)
			t.Fatalf("only some of the %d requests were decided: %d at the upstream", n, arrived.Load())
		}
	}
	close(release)
	wg.Wait()
	if got := arrived.Load(); got != lim {
		t.Errorf("requests at the upstream at once: got %d, want %d", got, lim)
	}
	refused := 0
	for _, c := range codes {
		if c == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != n-lim {
		t.Errorf("refused: got %d, want %d (codes %v)", refused, n-lim, codes)
	}
	// 401s were counted: the limit is spent. 200s gave their units back:
	// five more pass, one by one.
	var after []int
	for range lim {
		after = append(after, send(""))
	}
	want := status
	if status == http.StatusUnauthorized {
		want = http.StatusTooManyRequests
	}
	for i, c := range after {
		if c != want {
			t.Errorf("after: request %d got %d, want %d (all: %v)", i+1, c, want, after)
			break
		}
	}
}
