package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// StatusClientClosed is the status recorded (never sent) for a request whose
// client went away before the upstream answered, as nginx does.
const StatusClientClosed = 499

// DefaultUpstreamTimeout is the default UpstreamConfig.Timeout.
const DefaultUpstreamTimeout = 30 * time.Second

// ParseUpstreamURL parses the upstream's base URL: absolute, http or
// https.
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
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the upstream scheme %q is not http or https", u.Scheme)
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
	// MaxIdleConnsPerHost is the idle keep-alive pool. Default 256.
	MaxIdleConnsPerHost int
	// Logger receives upstream errors. Default slog.Default().
	Logger *slog.Logger
	// Events, if not nil, is told of every upstream response and error
	// (the metrics).
	Events UpstreamEvents
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
// any other upstream failure, 499 (not logged) when the client left.
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
	events := cfg.Events
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil, // never route through an environment proxy
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * cfg.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport:  tr,
		BufferPool: newBufferPool(),
		// The proxy's own messages (an upstream failing mid-body) go to
		// the one logger, not to the standard library's global one.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Flush after every write of the copy buffer, whatever the
		// response: streams (SSE, bodies of unknown length) reach the
		// client as the upstream writes them, and so do slow bodies of
		// known length.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if events != nil {
				events.UpstreamResponse(resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status, code, msg := upstreamError(r.Context(), err)
			if events != nil {
				events.UpstreamError(errorKind(status, err))
			}
			if status == StatusClientClosed {
				markStatus(w, StatusClientClosed)
				return
			}
			log.Warn("upstream request failed", "status", status, "method", r.Method, "path", r.URL.Path, "err", err)
			WriteError(w, status, code, msg)
		},
	}, nil
}

// upstreamError maps a transport error to the response status, error code
// and message. It is the one place that decides 499/502/504.
func upstreamError(ctx context.Context, err error) (int, string, string) {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return StatusClientClosed, "client_closed", "the client closed the request"
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
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
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
