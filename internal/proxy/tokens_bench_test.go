package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
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
			for b.Loop() {
				r.URL.Path = path
				r.Header["X-App-Id"] = app
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Body.Len() != int(size) {
					b.Fatalf("body of %d bytes, want %d", w.Body.Len(), size)
				}
			}
		})
	}
}
