package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/tracing/tracingtest"
)

// BenchmarkHandlerTracing is the admitted path of BenchmarkHandler (an
// app total and a rule, the upstream answering in memory) with tracing
// off, and on with 1% and with every request sampled, exporting to a
// real OTLP/HTTP receiver on loopback: the server span, the decision
// span and the client span whose context goes to the upstream. Compare
// cpu-ns/op (the process's CPU time per request, the exporter's and
// the in-process receiver's included) with -cpu 1.
// The upstream here costs nothing, so the ratios are an upper bound of
// what the system benchmark (bench/run.sh) can see.
func BenchmarkHandlerTracing(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    limit: 1000000000
    limits:
      - api: /v1/user/{id}
        limit: 1000000000
`
	for _, bc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{
		{"off", -1},
		{"sampled-none", 0},
		{"sampled-1pct", 0.01},
		{"sampled-all", 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tr *tracing.Tracer
			var prop func(*HandlerConfig)
			if bc.ratio >= 0 {
				rcv := tracingtest.NewHTTP(b)
				var err error
				tr, err = tracing.New(tracing.Config{Enabled: true, Endpoint: rcv.URL, Sampler: "parentbased_traceidratio", SamplerArg: bc.ratio, Store: "memory"})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { tr.Close() })
				prop = func(c *HandlerConfig) {
					u, _ := url.Parse("http://upstream.invalid")
					rp, err := NewUpstream(UpstreamConfig{URL: u, Propagator: tr.Propagator()})
					if err != nil {
						b.Fatal(err)
					}
					rp.Transport = stubTransport{}
					c.Upstream = rp
				}
			}
			var h http.Handler
			if prop != nil {
				h = tr.Handler(benchHandler(b, rules, prop))
			} else {
				h = benchHandler(b, rules)
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/v1/user/42", nil)
				app := []string{"app-1"}
				for pb.Next() {
					r.URL.Path = "/v1/user/42"
					r.Header["X-App-Id"] = app
					h.ServeHTTP(httptest.NewRecorder(), r)
				}
			})
			// The process's CPU time, exporter and receiver included:
			// steadier than ns/op on a shared machine.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
