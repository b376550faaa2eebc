package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// cpuTime returns the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRoutePool compares the admitted path to a single --upstream
// with the same path through a route to a pool of one target (the same
// upstream: the cost of the pool itself) and of two, over real loopback
// connections to real upstreams (in this process: their CPU is in every
// figure, and two upstream servers cost more than one). cpu-ns/op is the
// process's CPU time per request.
func BenchmarkRoutePool(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	up1, up2 := httptest.NewServer(ok), httptest.NewServer(ok)
	defer up1.Close()
	defer up2.Close()
	const limits = `
configs:
  - appId: app-1
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        limit: 1000000000
`
	routes := fmt.Sprintf(`
upstreams: [{name: users, targets: [%s, %s]}]
routes: [{path: /v1, upstream: users}]
`, up1.URL, up2.URL)
	oneTarget := fmt.Sprintf(`
upstreams: [{name: users, targets: [%s]}]
routes: [{path: /v1, upstream: users}]
`, up1.URL)
	quiet := slog.New(slog.DiscardHandler)
	for _, bc := range []struct{ name, rules string }{
		{"single-upstream", limits},
		{"route-one-target", oneTarget + limits},
		{"route-two-targets", routes + limits},
	} {
		b.Run(bc.name, func(b *testing.B) {
			parsed, err := config.Parse("bench.yaml", []byte(bc.rules))
			if err != nil {
				b.Fatal(err)
			}
			m := observe.NewMetrics(observe.MetricsConfig{Registry: prometheus.NewRegistry()})
			reg, _ := upstream.New(upstream.Config{Events: m, Logger: quiet})
			fw := UpstreamConfig{Logger: quiet, Events: m}
			rs, err := ruleset.CompileWith(parsed, time.Now(), ruleset.CompileOptions{Routes: &ruleset.RouteOptions{Registry: reg, Forwarder: RouteForwarder(fw)}})
			if err != nil {
				b.Fatal(err)
			}
			if set := rs.Upstreams(); set != nil {
				reg.Commit(set)
			}
			store, _ := limit.NewMemory(limit.MemoryConfig{})
			u, _ := url.Parse(up1.URL)
			fw.URL = u
			rp, err := NewUpstream(fw)
			if err != nil {
				b.Fatal(err)
			}
			h, err := NewHandler(HandlerConfig{Rules: rs, Store: store, Upstream: rp, Logger: quiet, Observers: []observe.Observer{m, observe.NewTop(observe.TopConfig{})}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			c0 := cpuTime(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					// A cancellable context, as net/http's server gives
					// every request: the Transport watches it either way.
					ctx, cancel := context.WithCancel(context.Background())
					r := httptest.NewRequestWithContext(ctx, "GET", "/v1/user/42", nil)
					r.Header.Set("X-App-Id", "app-1")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					cancel()
					if w.Code != 200 {
						b.Fatalf("got %d %s", w.Code, w.Body)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}
