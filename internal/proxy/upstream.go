package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
	"go.opentelemetry.io/otel/propagation"
)

// StatusClientClosed is the status recorded (never sent) for a request whose
// client went away before the upstream answered, as nginx does.
const StatusClientClosed = 499

// DefaultUpstreamTimeout is the default UpstreamConfig.Timeout.
const DefaultUpstreamTimeout = 30 * time.Second

// ParseUpstreamURL parses the upstream's base URL: absolute, http, https
// or h2c (HTTP/2 without TLS, with prior knowledge, as gRPC servers speak
// it).
func ParseUpstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if err := checkUpstreamURL(u); err != nil {
		return nil, err
	}
	return u, nil
}

func checkUpstreamURL(u *url.URL) error {
	if u == nil || u.Scheme == "" || u.Host == "" {
		return errors.New("the upstream must be an absolute URL like http://127.0.0.1:8081")
	}
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != config.SchemeH2C {
		return fmt.Errorf("the upstream scheme %q is not http, https or h2c", u.Scheme)
	}
	return nil
}

// UpstreamConfig configures the forwarding half of the gateway.
type UpstreamConfig struct {
	// URL is the upstream's base URL (scheme, host and optional path
	// prefix). Required.
	URL *url.URL
	// Timeout bounds the wait for the upstream's response headers; past
	// it the client gets 504. Default DefaultUpstreamTimeout (30s).
	Timeout time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For chain is passed
	// on, with the peer appended; from any other peer the upstream gets
	// the peer alone.
	TrustedProxies []netip.Prefix
	// PreserveHost forwards the client's Host header instead of the
	// upstream URL's host.
	PreserveHost bool
	// MaxIdleConnsPerHost is the idle keep-alive pool. Default 256.
	MaxIdleConnsPerHost int
	// Logger receives upstream errors. Default slog.Default().
	Logger *slog.Logger
	// Events, if not nil, is told of every upstream response and error
	// (the metrics).
	Events UpstreamEvents
	// Transport, if not nil, sends the requests instead of a Transport
	// of the proxy's own: a route's pool (package upstream), which
	// chooses the target and sets its host. MaxIdleConnsPerHost and
	// Timeout are then the pool's.
	Transport http.RoundTripper
	// StripSegments removes that many leading segments of the path
	// before it is joined to URL's (a route's stripPrefix).
	StripSegments int
	// Propagator, when not nil (tracing is on), writes the trace
	// context into the upstream's request, whose client span it starts
	// when the request's span records (docs/operations.md, "Traces").
	Propagator propagation.TextMapPropagator
}

// RouteForwarder returns what builds the reverse proxy of each route of a
// rule set (ruleset.RouteOptions.Forwarder): NewUpstream with cfg, and the
// route's pool, timeout and stripped segments in place of cfg's URL,
// Transport and StripSegments.
func RouteForwarder(cfg UpstreamConfig) func(*ruleset.Route) (http.Handler, error) {
	return func(r *ruleset.Route) (http.Handler, error) {
		fw := cfg
		fw.URL = r.Pool.Base()
		fw.Transport = upstream.WithTimeout(r.Pool, r.Timeout)
		fw.StripSegments = r.Strip
		return NewUpstream(fw)
	}
}

// UpstreamEvents receives what happens upstream.
type UpstreamEvents interface {
	// UpstreamResponse is called with the status of each response.
	UpstreamResponse(code int)
	// UpstreamError is called for each request that got no response:
	// kind is timeout, refused, failed or client_closed.
	UpstreamError(kind string)
}

// NewUpstream returns the reverse proxy that forwards admitted requests.
// It uses Rewrite only (the stdlib removes hop-by-hop headers), a tuned
// Transport, a buffer pool, and one error mapping: 504 on timeout, 502 on
// any other upstream failure, 499 (not logged) when the client left, 400
// (not logged) when the client's body could not be read.
func NewUpstream(cfg UpstreamConfig) (*httputil.ReverseProxy, error) {
	if err := checkUpstreamURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultUpstreamTimeout
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("the upstream timeout %s is negative", cfg.Timeout)
	}
	if cfg.MaxIdleConnsPerHost == 0 {
		cfg.MaxIdleConnsPerHost = 256
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	target := cfg.URL
	h2c := target.Scheme == config.SchemeH2C
	if h2c {
		// Sent as http requests, over HTTP/2 (the Transport's Protocols).
		t := *target
		t.Scheme = "http"
		target = &t
	}
	events := cfg.Events
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil, // never route through an environment proxy
		DialContext:           upstream.WriteBounded(dialer.DialContext, cfg.Timeout),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * cfg.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	// A pool tells a request whose body could not be read from the
	// client by an upstream.ClientBodyError; CheckBody does it for the
	// proxy's own Transport.
	rt := upstream.CheckBody(tr)
	if cfg.Transport != nil {
		rt = cfg.Transport
	}
	strip, prop := cfg.StripSegments, cfg.Propagator
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewriteForward(pr) // before SetURL joins the path
			if strip > 0 {
				pr.Out.URL.Path, pr.Out.URL.RawPath = stripSegments(pr.Out.URL.Path, strip), ""
			}
			pr.SetURL(target)
			if cfg.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
			// SetXForwarded sets X-Forwarded-For to the peer alone, and
			// ReverseProxy has removed the client's X-Forwarded-* and
			// Forwarded headers: the chain is kept only when the peer is
			// a trusted proxy, as the standard form (RFC 7239 §5.2's
			// X-Forwarded-For precursor) appends each hop.
			pr.SetXForwarded()
			if chain := pr.In.Header["X-Forwarded-For"]; len(chain) > 0 && peerTrusted(pr.In.RemoteAddr, cfg.TrustedProxies) {
				pr.Out.Header["X-Forwarded-For"] = []string{strings.Join(chain, ", ") + ", " + pr.Out.Header.Get("X-Forwarded-For")}
			}
			sendOnce(pr.Out)
			if prop != nil {
				traceUpstream(pr, prop)
			}
		},
		Transport:  rt,
		BufferPool: newBufferPool(),
		// The proxy's own messages (an upstream failing mid-body) go to
		// the one logger, not to the standard library's global one.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Streams (SSE, bodies of unknown length) reach the client as
		// the upstream writes them: ReverseProxy flushes those after
		// every write whatever FlushInterval is. Other bodies are flushed
		// at least every 100ms, so that a slow body of known length still
		// flows while a quick response leaves in one write. A negative
		// interval would flush every response's headers at once from a
		// timer goroutine: a second write and that goroutine for every
		// response, a fifth of the proxy's CPU (docs/performance.md, "Performance").
		FlushInterval: 100 * time.Millisecond,
		ModifyResponse: func(resp *http.Response) error {
			if events != nil {
				events.UpstreamResponse(resp.StatusCode)
			}
			if prop != nil {
				endUpstream(resp.Request, resp.StatusCode, "")
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if sw, ok := w.(*statusWriter); ok {
				sw.upstreamFailed = true
			}
			status, code, msg := upstreamError(clientContext(r), err)
			if events != nil {
				events.UpstreamError(errorKind(status, err))
			}
			if prop != nil {
				endUpstream(r, 0, errorKind(status, err))
			}
			if status == StatusClientClosed {
				markStatus(w, StatusClientClosed)
				return
			}
			if status == http.StatusBadRequest {
				// The client's own broken body: nothing the operator
				// can act on, and one caller could flood the log.
				WriteError(w, status, code, msg)
				return
			}
			if !errors.Is(err, upstream.ErrNoHealthyTarget) {
				// A pool left empty answers every request at once; the
				// ejections that emptied it were logged.
				log.Warn("upstream request failed", "status", status, "method", r.Method, "path", r.URL.Path, "err", err)
			}
			WriteError(w, status, code, msg)
		},
	}, nil
}

// sendOnce makes out a request that net/http's Transport never sends
// twice. The Transport resends a GET, HEAD or OPTIONS request without a
// body when the reused connection it was written on closes before the
// response (net/http's shouldRetryRequest): the upstream may then serve
// one admitted, once-counted request twice. A request whose body is not
// http.NoBody and that has no GetBody is not replayable; the empty body
// goes out as no body at all. (A
// TRACE, or a request with an Idempotency-Key header, may still be
// resent: the first is never worth a body, the second asks for it; see
// docs/rules.md, "What the upstream receives".)
func sendOnce(out *http.Request) {
	if out.Body != nil && out.Body != http.NoBody {
		return // a body that cannot be rewound: never resent
	}
	switch out.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		out.Body, out.GetBody, out.ContentLength = emptyBody{}, nil, 0
		// With no transfer coding set, the Transport would probe the
		// body of unknown length with a goroutine and a timer to see
		// whether it is empty; "identity" is the absence of a coding
		// (RFC 9112 §6.1): nothing is written for it, and the body it
		// copies is empty, so the request still goes out with no body.
		out.TransferEncoding = identity
	}
}

// emptyBody is an empty request body that is not http.NoBody. WriteTo
// spares io.Copy a copy buffer.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error)         { return 0, io.EOF }
func (emptyBody) WriteTo(io.Writer) (int64, error) { return 0, nil }
func (emptyBody) Close() error                     { return nil }

// identity is the TransferEncoding of a request sent with emptyBody.
var identity = []string{"identity"}

// peerTrusted reports whether the peer address of a request is a trusted
// proxy.
func peerTrusted(remoteAddr string, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && isTrusted(ap.Addr().Unmap(), trusted)
}

// upstreamError maps a transport error to the response status, error code
// and message. It is the one place that decides 400/499/502/504. A body
// that could not be read from the client (upstream.ClientBodyError) is
// the client's failure, answered 400 bad_request_body, not the
// upstream's 502 (docs/rules.md, the error table).
func upstreamError(ctx context.Context, err error) (int, string, string) {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return StatusClientClosed, "client_closed", "the client closed the request"
	}
	if be := (*upstream.ClientBodyError)(nil); errors.As(err, &be) {
		return http.StatusBadRequest, "bad_request_body", "the request body could not be read: " + be.Err.Error()
	}
	if errors.Is(err, upstream.ErrNoHealthyTarget) {
		return http.StatusServiceUnavailable, "no_healthy_upstream", err.Error()
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, "upstream_timeout", "the upstream did not answer in time"
	}
	return http.StatusBadGateway, "upstream_unavailable", "the upstream could not be reached or failed"
}

const copyBufferSize = 32 * 1024

// errorKind names an upstream failure for the metrics.
func errorKind(status int, err error) string {
	switch {
	case status == StatusClientClosed:
		return "client_closed"
	case status == http.StatusGatewayTimeout:
		return "timeout"
	case status == http.StatusBadRequest:
		return "client_body"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case status == http.StatusServiceUnavailable:
		return "no_healthy_target"
	}
	return "failed"
}

// bufferPool lends the copy buffers of httputil.ReverseProxy. It pools
// array pointers so that neither Get nor Put allocates.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBufferSize]byte)[:] }

func (b *bufferPool) Put(p []byte) {
	if cap(p) >= copyBufferSize {
		b.p.Put((*[copyBufferSize]byte)(p[:copyBufferSize]))
	}
}

var _ httputil.BufferPool = (*bufferPool)(nil)

// stripSegments removes the first n segments of the normalized path p;
// "/" when nothing is left.
func stripSegments(p string, n int) string {
	for ; n > 0 && p != ""; n-- {
		i := strings.IndexByte(p[1:], '/')
		if i < 0 {
			return "/"
		}
		p = p[i+1:]
	}
	if p == "" {
		return "/"
	}
	return p
}
