package proxy

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// This file lets a request over a limit wait for room instead of being
// refused (maxDelay on a rule; docs/plans-and-tokens.md), as nginx's
// limit_req delay does. The wait is a reservation in the store
// (limit.Request.Wait): the one decision of the request admits it at the
// earliest instant its limits have room within their maxDelay — on
// Redis, the fleet's counters, so that requests wait in order of arrival
// across the fleet — and counts it there; the gateway holds the request
// until then and forwards it. A request whose room is further away is
// refused at once, as without maxDelay. At most HandlerConfig.MaxWaiting
// requests wait at once: past that, requests are decided without a wait.
// A request takes its place just before its decision, which is what
// reserves room ahead (offerWaits), and keeps it until its wait ends (or
// gives it back at once, when it was decided without one): so requests
// decided together, as on Redis many are while their round trip is in
// flight, cannot between them reserve more waits than the places there
// are.

// DefaultMaxWaiting is the default cap on requests waiting for room.
const DefaultMaxWaiting = 1000

// waiters counts the requests that hold a place to wait: those held
// until the instant reserved for them, and those being decided that may
// be.
type waiters struct {
	max     int64
	waiting atomic.Int64
}

func newWaiters(max int) *waiters {
	if max == 0 {
		max = DefaultMaxWaiting
	}
	return &waiters{max: int64(max)}
}

// Waiting returns the number of requests waiting for room, with those
// being decided that may wait.
func (h *Handler) Waiting() int64 { return h.waits.waiting.Load() }

// enter takes a place to wait, if one of the cap's is free, and reports
// whether it did.
func (ws *waiters) enter() bool {
	for {
		n := ws.waiting.Load()
		if n >= ws.max {
			return false
		}
		if ws.waiting.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// offerWaits lets the limits of sc with maxDelay reserve room ahead
// (limit.Request.Wait) if the request takes a place to wait. It is called
// just before the decision, once the request's keys, costs and body are
// read and its concurrency slots taken: a client that sends its body
// slowly holds no place meanwhile.
func (h *Handler) offerWaits(sc *scratch) {
	for i, cl := range sc.lims[:sc.n] {
		if cl.MaxDelay > 0 && (sc.mayWait || h.waits.enter()) {
			sc.mayWait = true
			sc.reqs[i].Wait = cl.MaxDelay
		}
	}
}

// leave gives back sc's place to wait, if it holds one.
func (ws *waiters) leave(sc *scratch) {
	if sc.mayWait {
		sc.mayWait = false
		ws.waiting.Add(-1)
	}
}

// waitReserved holds a request that its decision admitted at a later
// instant (limit.Result.Delay) until then. It waits on the real clock.
// A client that goes away meanwhile leaves and is not forwarded; its
// reservation stays counted, as a request admitted and then aborted is.
func (h *Handler) waitReserved(r *http.Request, sc *scratch) {
	var delay time.Duration
	for i := range sc.n {
		delay = max(delay, sc.res[i].Delay)
	}
	if delay <= 0 {
		return
	}
	// Only a request that held a place asked to wait (offerWaits): it
	// keeps the place until it leaves (ServeHTTP).
	start := time.Now()
	if sc.o.Span != nil {
		defer func() { tracing.Waited(sc.o.Span, time.Since(start)) }()
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		sc.gone = true
	}
}

// jitter returns the seconds added to a Retry-After: 0 to
// --retry-after-jitter, at random, so that refused clients do not all
// come back at once.
func (h *Handler) jitter() int64 {
	if h.retryJitter < time.Second {
		return 0
	}
	return rand.Int64N(int64(h.retryJitter/time.Second) + 1)
}
