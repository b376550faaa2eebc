package upstream

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// maxAttempts bounds the targets one request is tried on.
const maxAttempts = 3

// RoundTrip sends req to a target of the pool: one chosen by the pool's
// balancing among those in it, and another when nothing of the request
// reached the first (no connection to it could be made: refused, timed
// out, or its TLS handshake failed). A request is never sent again once a
// connection took it; net/http's Transport alone resends on a reused
// connection, by its rules (see sendOnce in package proxy).
//
// A pool with no target in it answers an error wrapping
// ErrNoHealthyTarget; a target that sends no response headers within the
// timeout an error whose Timeout method reports true.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.roundTrip(req, p.reg.cfg.ResponseHeaderTimeout)
}

func (p *Pool) roundTrip(req *http.Request, timeout time.Duration) (*http.Response, error) {
	now := p.reg.cfg.Now().UnixNano()
	in := inPool{now: now, panicking: p.panicking(now)}
	var tried [maxAttempts]*Target
	n := 0
	body := req.Body
	var held *heldBody
	if body != nil && body != http.NoBody && !emptyIdentity(req) {
		// The Transport closes the body of a request that fails; held
		// keeps it open for the next target while nothing of it was
		// read, and records whether reading it failed: the client's
		// failure, not the target's.
		held = &heldBody{rc: body, released: len(p.targets) == 1}
		body = held
	}
	var lastErr error
	for {
		t := p.pick(in, tried[:n])
		if t == nil {
			if lastErr != nil {
				held.release()
				return nil, lastErr
			}
			held.release()
			return nil, &NoHealthyTargetError{Upstream: p.name}
		}
		tried[n] = t
		n++
		// Only a try that another target could follow needs to know
		// whether the request reached its target: the others are not
		// traced, which spares the trace's allocations.
		traced := n < maxAttempts && p.another(in, tried[:n])
		resp, err, reached := p.send(req, body, t, timeout, traced)
		if err == nil {
			held.release()
			p.observe(t, resp.StatusCode >= 500 && p.failedStatus(resp.StatusCode))
			return resp, nil
		}
		if berr := held.failed(); berr != nil {
			// The client's body could not be read (a malformed chunk, a
			// body cut short, a client gone mid-body): the target did
			// nothing wrong, and another would fare no better
			// (docs/routes.md, "Health").
			held.release()
			return nil, &ClientBodyError{Err: berr}
		}
		if req.Context().Err() == nil {
			// The target failed, not the client, who went away.
			p.observe(t, true)
		}
		if !traced || reached || held.read() || req.Context().Err() != nil {
			held.release()
			return nil, err
		}
		lastErr = err
		tracing.Retried(req.Context(), t.url.Host, err)
		held.reset()
	}
}

// send sends req to t with body; reached reports whether a connection to
// t took the request (so that it may have been written). It is only known
// when traced: the caller traces a try that another target could follow,
// and needs reached for no other.
func (p *Pool) send(req *http.Request, body io.ReadCloser, t *Target, timeout time.Duration, traced bool) (resp *http.Response, err error, reached bool) {
	// One allocation holds the try's request, URL, trace and counted
	// response body.
	a := &attempt{}
	if traced {
		a.req = *req.WithContext(a.traceContext(req.Context()))
	} else {
		a.req = *req
	}
	a.url = *req.URL
	a.url.Scheme, a.url.Host = t.scheme, t.url.Host
	out := &a.req
	out.URL, out.Body = &a.url, body
	t.outstanding.Add(1)
	resp, err = t.transport(timeout, p.reg.cfg.ResponseHeaderTimeout).RoundTrip(out)
	if err != nil {
		t.outstanding.Add(-1)
		return nil, err, a.reached.Load()
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the upgraded connection, which ReverseProxy needs
		// as an io.ReadWriteCloser: it is not wrapped, nor counted as
		// outstanding.
		t.outstanding.Add(-1)
		return resp, nil, true
	}
	a.body = countedBody{ReadCloser: resp.Body, t: t}
	resp.Body = &a.body
	return resp, nil, true
}

// attempt is one try of a request on a target: the request sent, its URL
// and trace, and the response body that ends the target's outstanding
// count.
type attempt struct {
	req     http.Request
	url     url.URL
	body    countedBody
	trace   httptrace.ClientTrace
	reached atomic.Bool
}

// traceContext returns ctx with a's trace, which records that a
// connection took the request, on top of the trace ctx has.
//
// httputil.ReverseProxy traces every request it sends (for its
// Got1xxResponse), and httptrace.WithClientTrace composes a second trace
// with the first by reflection over all its hooks: some 2,500
// instructions a request, a quarter of what a pool added to one. So a's
// trace is a copy of the first with GotConn added, as WithClientTrace
// would compose them (the new hook before the old), and the context
// answers it where ctx answered the first. Without a trace in ctx,
// WithClientTrace composes nothing.
func (a *attempt) traceContext(ctx context.Context) context.Context {
	old := httptrace.ContextClientTrace(ctx)
	if old == nil {
		a.trace.GotConn = a.gotConn
		return httptrace.WithClientTrace(ctx, &a.trace)
	}
	a.trace = *old
	if prev := old.GotConn; prev != nil {
		a.trace.GotConn = func(info httptrace.GotConnInfo) {
			a.reached.Store(true)
			prev(info)
		}
	} else {
		a.trace.GotConn = a.gotConn
	}
	return &traceContext{Context: ctx, trace: &a.trace}
}

func (a *attempt) gotConn(httptrace.GotConnInfo) { a.reached.Store(true) }

// traceContext is a context whose client trace (httptrace) replaces its
// parent's.
type traceContext struct {
	context.Context
	trace *httptrace.ClientTrace
}

// Value answers the trace where the parent's value is its trace: the
// httptrace package stores *ClientTrace values under a key of its own.
// The parent's network hooks (DNS, connect) are kept by the parent,
// under another key, and a's copy has the same ones.
func (c *traceContext) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*httptrace.ClientTrace); ok {
		return c.trace
	}
	return v
}

// emptyIdentity reports whether req goes out with an empty body and no
// transfer coding (proxy's sendOnce): there is nothing to keep.
func emptyIdentity(req *http.Request) bool {
	return req.ContentLength == 0 && len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "identity"
}

// countedBody ends a request's outstanding count when its response body
// is closed.
type countedBody struct {
	io.ReadCloser
	t    *Target
	done atomic.Bool
}

func (b *countedBody) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.t.outstanding.Add(-1)
	}
	return b.ReadCloser.Close()
}

// ClientBodyError is the error of a request that failed because its body
// could not be read from the client: a malformed chunked body (RFC 9112
// §7.1), one shorter than its Content-Length (RFC 9112 §6.2), a client
// gone mid-body. It is not counted against the target, and the request is
// not tried on another (docs/routes.md, "Health").
type ClientBodyError struct {
	// Err is the error reading the body gave.
	Err error
}

func (e *ClientBodyError) Error() string {
	return "reading the request body: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *ClientBodyError) Unwrap() error { return e.Err }

// CheckBody returns rt telling the failure of a request whose body could
// not be read by a *ClientBodyError, for a RoundTripper that is not a
// Pool (a Pool does it itself).
func CheckBody(rt http.RoundTripper) http.RoundTripper { return bodyCheck{rt} }

type bodyCheck struct{ rt http.RoundTripper }

func (c bodyCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || emptyIdentity(req) {
		return c.rt.RoundTrip(req)
	}
	b := &heldBody{rc: req.Body, released: true}
	out := *req
	out.Body = b
	resp, err := c.rt.RoundTrip(&out)
	if err != nil {
		if berr := b.failed(); berr != nil {
			return nil, &ClientBodyError{Err: berr}
		}
	}
	return resp, err
}

// heldBody is a request body that the Transport may close after a failed
// try without closing the inbound body, so that the request can go to
// another target, as long as nothing of it was read; one made released
// holds nothing. It records the first error reading the inbound body
// gave, other than io.EOF. Its methods are safe on a nil *heldBody, which
// holds nothing.
type heldBody struct {
	rc io.ReadCloser

	mu       sync.Mutex
	n        int64
	err      error // the first read error, not io.EOF, before shut
	released bool
	closed   bool // closed while held
	// shut is set once the Transport closed the body: a read that fails
	// after it failed because of that close (an HTTP/2 stream the target
	// reset has its body closed while its writer still reads it), not
	// because of the client.
	shut bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.n += int64(n)
	if err != nil && err != io.EOF && b.err == nil && !b.shut {
		b.err = err
	}
	b.mu.Unlock()
	return n, err
}

// failed returns the error reading the inbound body gave, nil if none.
// The Transport reports a failed write of the body only after the read
// that failed returned, so a try that failed because of the body finds
// it here.
func (b *heldBody) failed() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *heldBody) Close() error {
	b.mu.Lock()
	b.shut = true
	if !b.released {
		b.closed = true
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	return b.rc.Close()
}

// read reports whether any of the body was read.
func (b *heldBody) read() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n > 0
}

// reset forgets a Close of the try that failed.
func (b *heldBody) reset() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.closed = false
	b.mu.Unlock()
}

// release ends the hold: a Close made during it happens now, and later
// ones close the body at once.
func (b *heldBody) release() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.released = true
	closed := b.closed
	b.mu.Unlock()
	if closed {
		b.rc.Close()
	}
}

// inPool says which targets take a request: those in the pool at now
// (Unix ns), and the ejected ones too when the pool is panicking.
type inPool struct {
	now       int64
	panicking bool
}

// failedStatus reports whether a response with status code counts as a
// failure of its target: the upstream's outlier statuses, none by
// default (docs/routes.md, "Health").
func (p *Pool) failedStatus(code int) bool {
	for _, r := range p.failStatus {
		if code >= r.Lo && code <= r.Hi {
			return true
		}
	}
	return false
}

// pick returns the target for a request among those in and not in
// tried, nil if there is none.
func (p *Pool) pick(in inPool, tried []*Target) *Target {
	if p.roundRobin {
		return p.pickRoundRobin(in, tried)
	}
	a := p.pickRandom(in, tried, -1)
	if a < 0 {
		return nil
	}
	b := p.pickRandom(in, tried, a)
	if b < 0 {
		return p.targets[a]
	}
	// The one with fewer requests outstanding for its weight.
	ta, tb := p.targets[a], p.targets[b]
	if tb.outstanding.Load()*p.weights[a] < ta.outstanding.Load()*p.weights[b] {
		return tb
	}
	return ta
}

// eligible reports whether the target i may take a request.
func (p *Pool) eligible(i int, in inPool, tried []*Target, not int) bool {
	t := p.targets[i]
	if i == not || !t.usable(in.now, in.panicking) {
		return false
	}
	for _, x := range tried {
		if x == t {
			return false
		}
	}
	return true
}

// another reports whether a target not in tried may take a request.
func (p *Pool) another(in inPool, tried []*Target) bool {
	for i := range p.targets {
		if p.eligible(i, in, tried, -1) {
			return true
		}
	}
	return false
}

// pickRandom returns the index of an eligible target other than not,
// chosen at random in proportion to the weights, or -1.
func (p *Pool) pickRandom(in inPool, tried []*Target, not int) int {
	var sum int64
	for i := range p.targets {
		if p.eligible(i, in, tried, not) {
			sum += p.weights[i]
		}
	}
	if sum == 0 {
		return -1
	}
	r := rand.Int64N(sum)
	for i := range p.targets {
		if p.eligible(i, in, tried, not) {
			if r -= p.weights[i]; r < 0 {
				return i
			}
		}
	}
	return -1
}

// pickRoundRobin returns the next eligible target by smooth weighted
// round-robin: each target gains its weight, the one with the most is
// chosen and loses the sum of the weights.
func (p *Pool) pickRoundRobin(in inPool, tried []*Target) *Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, total := -1, int64(0)
	for i := range p.targets {
		if !p.eligible(i, in, tried, -1) {
			continue
		}
		w := p.weights[i]
		p.current[i] += w
		total += w
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	p.current[best] -= total
	return p.targets[best]
}
