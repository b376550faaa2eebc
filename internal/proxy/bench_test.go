package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// stubTransport answers every request in memory, so the benchmark measures
// the gateway's own cost rather than a network round trip.
type stubTransport struct{}

func (stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(`{"ok":true}`)),
		ContentLength: 11,
	}, nil
}

func benchHandler(b *testing.B, rules string, opts ...func(*HandlerConfig)) *Handler {
	b.Helper()
	parsed, err := config.Parse("bench.yaml", []byte(rules))
	if err != nil {
		b.Fatal(err)
	}
	rs, err := ruleset.Compile(parsed, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	store, _ := limit.NewMemory(limit.MemoryConfig{})
	u, _ := url.Parse("http://upstream.invalid")
	rp, err := NewUpstream(UpstreamConfig{URL: u})
	if err != nil {
		b.Fatal(err)
	}
	rp.Transport = stubTransport{}
	// As `gateway serve` runs it: with metrics and /top's observer.
	m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry(), Keys: store.Len})
	rp.ModifyResponse = func(r *http.Response) error { m.UpstreamResponse(r.StatusCode); return nil }
	hcfg := HandlerConfig{Rules: rs, Store: store, Upstream: rp, Observers: []observe.Observer{m, observe.NewTop(observe.TopConfig{})}}
	for _, o := range opts {
		o(&hcfg)
	}
	h, err := NewHandler(hcfg)
	if err != nil {
		b.Fatal(err)
	}
	return h
}

func BenchmarkHandler(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        limit: 1000000000
  - appId: app-blocked
    limits:
      - api: /
        limit: 0
  - appId: app-user
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        by: header:X-User-Id
        limit: 1000000000
`
	// The baseline: the same ReverseProxy and transport with no limiting.
	b.Run("bare-reverseproxy", func(b *testing.B) {
		u, _ := url.Parse("http://upstream.invalid")
		rp, err := NewUpstream(UpstreamConfig{URL: u})
		if err != nil {
			b.Fatal(err)
		}
		rp.Transport = stubTransport{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := httptest.NewRequest("GET", "/v1/user/42", nil)
			r.Header.Set("X-App-Id", "app-1")
			for pb.Next() {
				rp.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	})
	// admitted is by: app (the rule's one counter); admitted-by-header
	// the same rules keyed by: header:X-User-Id.
	for _, bc := range []struct{ name, app string }{
		{"admitted", "app-1"},
		{"limited", "app-blocked"},
		{"admitted-by-header", "app-user"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHandler(b, rules)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/v1/user/42", nil)
				r.Header.Set("X-User-Id", "user-42")
				app := []string{bc.app}
				for pb.Next() {
					w := httptest.NewRecorder()
					// The handler removes the app header before
					// forwarding: without it again, every request
					// after the first would be an unknown caller.
					r.URL.Path = "/v1/user/42"
					r.Header["X-App-Id"] = app
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// BenchmarkHandlerConcurrency is the handler with a concurrency limit
// beside a rate limit, on each store: every request takes a slot of the
// app's and of the rule's count (by header) and gives them back. The
// Redis case runs against a local redis-server (two round trips more per
// request: take and release).
func BenchmarkHandlerConcurrency(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    concurrency: 1000000
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        by: header:X-User-Id
        limit: 1000000000
        concurrency: 1000000
`
	for _, store := range []string{"memory", "redis"} {
		b.Run(store, func(b *testing.B) {
			var opt func(*HandlerConfig)
			if store == "redis" {
				srv := redistest.Start(b)
				red, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 5 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { red.Close() })
				slots, err := redisstore.NewSlots(red, redisstore.SlotsConfig{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(slots.Close)
				opt = func(h *HandlerConfig) { h.Store, h.Slots, h.FailMode = red, slots, failmode.Closed }
			}
			h := benchHandler(b, rules, func(h *HandlerConfig) {
				if opt != nil {
					opt(h)
				}
			})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/v1/user/42", nil)
				r.Header.Set("X-User-Id", "user-42")
				app := []string{"app-1"}
				for pb.Next() {
					w := httptest.NewRecorder()
					r.URL.Path = "/v1/user/42"
					r.Header["X-App-Id"] = app
					h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("got %d %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}

// costTransport is stubTransport with a status and cost header of choice.
type costTransport struct {
	status int
	cost   string
}

func (c costTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: c.status, ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Cost": {c.cost}},
		Body:          io.NopCloser(strings.NewReader(`{"ok":true}`)),
		ContentLength: 11,
	}, nil
}

// BenchmarkHandlerCost runs admitted requests through rules with a fixed
// cost, a cost from the response and a count of some statuses (see
// "Request cost" in docs/rules.md), on the memory store and on Redis, where
// the last two take a second script call after the response.
func BenchmarkHandlerCost(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /fixed
        limit: 1000000000
        cost: 5
      - api: /header
        limit: 1000000000
        cost: {header: X-RateLimit-Cost, max: 100}
      - api: /count
        limit: 1000000000
        count: {status: [401, "5xx"]}
`
	for _, store := range []string{"memory", "redis"} {
		for _, bc := range []struct {
			path   string
			status int
		}{{"/fixed", 200}, {"/header", 200}, {"/count", 401}, {"/count", 200}} {
			b.Run(store+bc.path+"-"+strconv.Itoa(bc.status), func(b *testing.B) {
				if store == "redis" && testing.Short() {
					b.Skip("-short: no redis-server")
				}
				h := benchHandler(b, rules, func(c *HandlerConfig) {
					if store == "redis" {
						red, err := redisstore.New(redisstore.Config{URL: redistest.Start(b).URL(), Timeout: 5 * time.Second})
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { red.Close() })
						c.Store = red
					}
					c.Upstream.(*httputil.ReverseProxy).Transport = costTransport{status: bc.status, cost: "3"}
				})
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r := httptest.NewRequest("GET", bc.path, nil)
					app := []string{"app-1"}
					for pb.Next() {
						r.URL.Path = bc.path
						r.Header["X-App-Id"] = app
						h.ServeHTTP(httptest.NewRecorder(), r)
					}
				})
			})
		}
	}
}
