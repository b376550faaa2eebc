package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// duplexUpstream streams a response to a POST while it reads the body:
// it reads the first part of the body, sends the first event, then reads the rest of the body and sends the rest of the
// stream, which reports how many body bytes it read.
type duplexUpstream struct{ firstLen int }

const duplexFirst = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"

func (u *duplexUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Without it the upstream's own server would wait for the whole
	// body before its first flush.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	if _, err := io.ReadFull(r.Body, make([]byte, u.firstLen)); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, duplexFirst)
	http.NewResponseController(w).Flush()
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		return // the body broke: the stream is cut
	}
	io.WriteString(w, "data: {\"read\":"+strconv.FormatInt(int64(u.firstLen)+n, 10)+"}\n\ndata: [DONE]\n\n")
}

// headerSignal tells when the gateway writes the response's status: the
// first event follows at once.
type headerSignal struct {
	http.ResponseWriter
	once  sync.Once
	wrote chan struct{}
}

func (h *headerSignal) WriteHeader(code int) {
	h.once.Do(func() { close(h.wrote) })
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerSignal) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// TestStreamWhileBodyArrives: a stream answering an HTTP/1.1 POST whose
// body is still arriving reaches its end. net/http's HTTP/1 server, unless
// the handler enables full duplex, reads what is left of a request's body
// when the response's headers go out and closes it, under the reverse
// proxy still copying it to the upstream: the upstream connection breaks
// and the stream is cut after its first event (http.ResponseController's
// EnableFullDuplex, https://github.com/golang/go/issues/15527).
func TestStreamWhileBodyArrives(t *testing.T) {
	t.Parallel()
	const firstLen, restLen = 1024, 128 << 10 // the rest under the server's 256 KiB it would discard
	// The cut is a race: one run in a few shows it without full duplex.
	for i := range 20 {
		up := &duplexUpstream{firstLen: firstLen}
		us := httptest.NewServer(up)
		t.Cleanup(us.Close)
		g := newGWWith(t, basicRules, us.URL, &upstreamRecorder{})
		wrote := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.h.ServeHTTP(&headerSignal{ResponseWriter: w, wrote: wrote}, r)
		}))
		t.Cleanup(srv.Close)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pr, pw := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/api/chat", pr)
		req.ContentLength = firstLen + restLen
		req.Header.Set("X-App-Id", "app-1")
		type result struct {
			resp *http.Response
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			done <- result{resp, err}
		}()
		go func() {
			// The first part; the rest once the gateway is answering.
			pw.Write(make([]byte, firstLen))
			select {
			case <-wrote:
			case <-ctx.Done():
			}
			pw.Write(make([]byte, restLen))
			pw.Close()
		}()
		res := <-done
		if res.err != nil {
			t.Fatalf("run %d: %v", i, res.err)
		}
		body, err := io.ReadAll(bufio.NewReader(res.resp.Body))
		res.resp.Body.Close()
		want := duplexFirst + "data: {\"read\":" + strconv.Itoa(firstLen+restLen) + "}\n\ndata: [DONE]\n\n"
		if err != nil || string(body) != want {
			t.Fatalf("run %d: the client got %q, %v; want the whole stream %q", i, body, err, want)
		}
	}
}
