package upstream

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// newHanging is an upstream that never answers until the test ends.
func newHanging(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) }) // runs first
	return s
}

// ejected returns how many of p's targets are ejected at c's now.
func ejected(p *Pool, c *clock) int {
	n := 0
	for _, st := range p.States(c.Now()) {
		if st.State == "ejected" {
			n++
		}
	}
	return n
}

// TestPassiveEjectionIsBounded sends requests that fail on every target of
// a pool, as one caller can: passive ejection never takes out more of the
// pool than its bounds allow, nor its last target.
func TestPassiveEjectionIsBounded(t *testing.T) {
	t.Parallel()
	outlier := func(failures, pct int, statuses ...config.StatusRange) *config.Outlier {
		return &config.Outlier{Failures: failures, Ejection: time.Minute, MaxEjection: time.Minute,
			MaxEjectionPercent: pct, Statuses: statuses}
	}
	tests := []struct {
		name string
		// targets are what each target does: "failing" answers 500,
		// "hanging" never answers, "dead" refuses connections.
		targets []string
		outlier *config.Outlier
		timeout time.Duration
		// requests are sent; wantEjected of the targets are out after
		// them.
		requests    int
		wantEjected int
		// noFailures: the requests count as no failure of a target.
		noFailures bool
	}{
		{name: "500s through two targets, 5xx not counted", targets: []string{"failing", "failing"},
			requests: 10 * DefaultFailures, noFailures: true},
		{name: "500s through two targets, 5xx counted", targets: []string{"failing", "failing"},
			outlier: outlier5xx(), requests: 10 * DefaultFailures, wantEjected: 1},
		{name: "timeouts on a one-target pool", targets: []string{"hanging"},
			timeout: 100 * time.Millisecond, requests: 2 * DefaultFailures},
		{name: "refused on a one-target pool", targets: []string{"dead"},
			requests: 2 * DefaultFailures},
		{name: "four dead targets, at most half ejected", targets: slices.Repeat([]string{"dead"}, 4),
			outlier: outlier(1, 50), requests: 20, wantEjected: 2},
		{name: "three dead targets, 100% ejectable: the last stays", targets: slices.Repeat([]string{"dead"}, 3),
			outlier: outlier(1, 100), requests: 20, wantEjected: 2},
		{name: "ten 500s, 10% of ten targets: one", targets: slices.Repeat([]string{"failing"}, 10),
			outlier: outlier(1, 10, config.StatusRange{Lo: 500, Hi: 599}), requests: 10, wantEjected: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A dead target's port is held until every target has its
			// URL, so that no two dead targets share one.
			var urls []string
			var held []net.Listener
			for _, kind := range tt.targets {
				switch kind {
				case "failing":
					u := newCounting(t)
					u.status.Store(500)
					urls = append(urls, u.URL)
				case "hanging":
					urls = append(urls, newHanging(t).URL)
				case "dead":
					l, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, l)
					urls = append(urls, "http://"+l.Addr().String())
				}
			}
			for _, l := range held {
				l.Close()
			}
			c := newClock()
			reg := newRegistry(t, c)
			p := buildOutlier(t, reg, config.BalanceRoundRobin, nil, tt.outlier, urls...)
			rt := WithTimeout(p, tt.timeout)
			for i := range tt.requests {
				code, err := get(t, rt, p.Base())
				if errors.Is(err, ErrNoHealthyTarget) {
					t.Fatalf("request %d: %v; want the pool to keep a target", i, err)
				}
				var ne net.Error
				if tt.timeout > 0 && !(errors.As(err, &ne) && ne.Timeout()) {
					t.Fatalf("request %d: got %d, %v; want a timeout", i, code, err)
				}
			}
			if got := ejected(p, c); got != tt.wantEjected {
				t.Errorf("ejected targets: got %d of %d, want %d; states %+v", got, len(urls), tt.wantEjected, p.States(c.Now()))
			}
			if !p.Ready(c.Now()) {
				t.Errorf("Ready: got false, want true")
			}
			for _, st := range p.States(c.Now()) {
				if tt.noFailures && st.Failures != 0 {
					t.Errorf("target %s: %d failures, want 0: a 500 is not a failure unless the outlier statuses say so", st.URL, st.Failures)
				}
			}
		})
	}
}

// TestPanicRouting ejects three targets of four: below the panic
// threshold, the ejected targets take requests again.
func TestPanicRouting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		threshold int
		wantPanic bool
	}{
		{name: "threshold 50", threshold: 50, wantPanic: true},
		{name: "off", threshold: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ups := []*counting{newCounting(t), newCounting(t), newCounting(t), newCounting(t)}
			for _, u := range ups[:3] {
				u.status.Store(500)
			}
			c := newClock()
			reg := newRegistry(t, c)
			o := &config.Outlier{Failures: 1, Ejection: time.Minute, MaxEjection: time.Minute, MaxEjectionPercent: 100,
				PanicThreshold: tt.threshold, Statuses: []config.StatusRange{{Lo: 500, Hi: 599}}}
			p := buildOutlier(t, reg, config.BalanceRoundRobin, nil, o, ups[0].URL, ups[1].URL, ups[2].URL, ups[3].URL)
			for range 4 {
				get(t, p, p.Base())
			}
			if got := ejected(p, c); got != 3 {
				t.Fatalf("ejected: got %d, want the 3 failing targets; states %+v", got, p.States(c.Now()))
			}
			if got := p.Panicking(c.Now()); got != tt.wantPanic {
				t.Errorf("Panicking: got %v, want %v", got, tt.wantPanic)
			}
			var before [4]int64
			for i, u := range ups {
				before[i] = u.n.Load()
			}
			for range 40 {
				get(t, p, p.Base())
			}
			for i, u := range ups[:3] {
				got := u.n.Load() - before[i]
				if tt.wantPanic && got == 0 {
					t.Errorf("panicking: ejected target %d got no request of 40, want a share", i)
				}
				if !tt.wantPanic && got != 0 {
					t.Errorf("not panicking: ejected target %d got %d requests, want 0", i, got)
				}
			}
			if got := ejected(p, c); got != 3 {
				t.Errorf("after: ejected %d, want 3 still", got)
			}
		})
	}
}
