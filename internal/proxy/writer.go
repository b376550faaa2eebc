package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync/atomic"
)

// statusWriter records the status a response was given, for logs and
// metrics. Unwrap lets http.ResponseController (used by ReverseProxy for
// flushing) reach the underlying writer; Hijack records the 101 of a
// protocol upgrade.
type statusWriter struct {
	http.ResponseWriter
	status int
	// charge, when not nil, is called once with the final status before
	// the response's headers are written (docs/rules.md, "Request cost").
	charge func(code int)
	// tap, when not nil, reads the body sent for a cost the body reports
	// (tokens.go).
	tap *tokenTap
	// unread reports whether the request has a body the gateway has not
	// read; forwarding, whether the request is being forwarded. A
	// response written before, a refusal, closes the connection
	// (refusal.go).
	unread, forwarding bool
	// upstreamFailed is set when the upstream gave no response (the
	// ErrorHandler ran).
	upstreamFailed bool
	// up, when not nil, cancels the upstream's request of a request
	// whose client may leave before the response (cost.go).
	up *upstreamCancel
}

// upstreamCancel cancels an upstream's request that is not canceled with
// its client's, once the client has gone and the response's status is
// known. It is not pooled with the scratch: a context.AfterFunc may read
// it after the request is done.
type upstreamCancel struct {
	answered atomic.Bool
	cancel   context.CancelFunc
}

// answer records that the response's status is known, and cancels the
// upstream's request if the client of ctx, its request's context, has
// gone. It looks at ctx after it records the status: a client that leaves
// meanwhile finds the status known (clientGone), or answer finds it gone.
func (u *upstreamCancel) answer(ctx context.Context) {
	u.answered.Store(true)
	if ctx.Err() != nil {
		u.cancel()
	}
}

// clientGone cancels the upstream's request if its status is known.
func (u *upstreamCancel) clientGone() {
	if u.answered.Load() {
		u.cancel()
	}
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		if s.unread && !s.forwarding {
			s.Header()["Connection"] = hdrClose
		}
		s.status = code
		if s.charge != nil {
			s.charge(code)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		if s.unread && !s.forwarding {
			s.Header()["Connection"] = hdrClose
		}
		s.status = http.StatusOK
		if s.charge != nil {
			s.charge(http.StatusOK)
		}
	}
	n, err := s.ResponseWriter.Write(b)
	if s.tap != nil {
		s.tap.write(s.Header(), b[:n])
	}
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack takes over the connection and records 101: ReverseProxy hijacks
// only to tunnel a protocol switch, and writes the upstream's 101 on the
// connection itself, never through WriteHeader.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return conn, brw, err
}

// markStatus records a status that is not sent, such as 499 for a client
// that went away.
func markStatus(w http.ResponseWriter, code int) {
	if sw, ok := w.(*statusWriter); ok && sw.status == 0 {
		sw.status = code
	}
}
