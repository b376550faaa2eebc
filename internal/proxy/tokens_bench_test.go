package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"syscall"
	"testing"
)

// sseTransport answers with an OpenAI-style stream of 200 chunks and a
// final usage chunk, one event per Read, as a streaming upstream does.
type sseTransport struct{ events []string }

type eventReader struct {
	events []string
	i      int
}

func (e *eventReader) Read(p []byte) (int, error) {
	if e.i >= len(e.events) {
		return 0, io.EOF
	}
	n := copy(p, e.events[e.i])
	e.i++
	return n, nil
}

func (s sseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"text/event-stream"}},
		Body:          io.NopCloser(&eventReader{events: s.events}),
		ContentLength: -1,
	}, nil
}

// processCPU returns the CPU time the process has used, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// sinkWriter is a ResponseWriter that counts and drops the body, as a
// client connection takes it, and flushes nothing.
type sinkWriter struct {
	h http.Header
	n int
}

func (s *sinkWriter) Header() http.Header         { return s.h }
func (s *sinkWriter) WriteHeader(int)             {}
func (s *sinkWriter) Write(b []byte) (int, error) { s.n += len(b); return len(b), nil }
func (s *sinkWriter) Flush()                      {}

// BenchmarkStreamedTokens runs streamed responses (200 events, 22 KB)
// through a rule without a cost and through a token budget read from the
// stream (cost: {body: usage.total_tokens}); the ratio of their ns/op is
// the CPU a token budget adds per request (docs/plans-and-tokens.md).
func BenchmarkStreamedTokens(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /plain
        limit: 1000000000
      - api: /tokens
        limit: 1000000000
        cost: {body: usage.total_tokens, max: 1000000}
`
	var events []string
	for range 200 {
		events = append(events, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token "}}]}`+"\n\n")
	}
	events = append(events, `data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":200,"total_tokens":209}}`+"\n\n", "data: [DONE]\n\n")
	size := int64(len(strings.Join(events, "")))
	for _, path := range []string{"/plain", "/tokens"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			h := benchHandler(b, rules, func(c *HandlerConfig) {
				c.Upstream.(*httputil.ReverseProxy).Transport = sseTransport{events: events}
			})
			b.ReportAllocs()
			b.SetBytes(size)
			r := httptest.NewRequest("POST", path, nil)
			app := []string{"app-1"}
			// CPU time, not wall time: on a shared machine the wall time
			// of a request measures the other processes.
			cpu0 := processCPU()
			for b.Loop() {
				r.URL.Path = path
				r.Header["X-App-Id"] = app
				w := &sinkWriter{h: http.Header{}}
				h.ServeHTTP(w, r)
				if w.n != int(size) {
					b.Fatalf("body of %d bytes, want %d", w.n, size)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkStreamedTokensLoopback is BenchmarkStreamedTokens with the
// gateway serving a real client over loopback TCP, each event written
// and flushed to the socket as `gateway serve` does. Its cpu-ns/op is the
// whole process's (gateway and client; the upstream is in memory).
func BenchmarkStreamedTokensLoopback(b *testing.B) {
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /plain
        limit: 1000000000
      - api: /tokens
        limit: 1000000000
        cost: {body: usage.total_tokens, max: 1000000}
`
	var events []string
	for range 200 {
		events = append(events, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token "}}]}`+"\n\n")
	}
	events = append(events, `data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":200,"total_tokens":209}}`+"\n\n", "data: [DONE]\n\n")
	size := int64(len(strings.Join(events, "")))
	for _, path := range []string{"/plain", "/tokens"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			h := benchHandler(b, rules, func(c *HandlerConfig) {
				c.Upstream.(*httputil.ReverseProxy).Transport = sseTransport{events: events}
			})
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := srv.Client()
			b.ReportAllocs()
			b.SetBytes(size)
			cpu0 := processCPU()
			for b.Loop() {
				req, _ := http.NewRequest("POST", srv.URL+path, nil)
				req.Header.Set("X-App-Id", "app-1")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != size {
					b.Fatalf("body of %d bytes, want %d", n, size)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
