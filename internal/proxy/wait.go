package proxy

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
)

// This file lets a request over a limit wait for room instead of being
// refused (maxDelay on a rule; docs/plans-and-tokens.md), as nginx's
// limit_req delay does: when every limit that refused it sets maxDelay
// and says room comes back within it (Result.RetryAfter), the request
// queues behind the others waiting on the same counter, in order of
// arrival; the first in the queue sleeps until the store says there is
// room, asks the store again — on Redis, the fleet's counters — and is
// admitted and counted, or sleeps again while the time it has left
// allows. A request that cannot fit is refused at once, as without
// maxDelay. At most WaitConfig.MaxWaiting requests wait at once; a client
// that goes away leaves the queue.

// DefaultMaxWaiting is the default cap on requests waiting for room.
const DefaultMaxWaiting = 1000

// waiters are the queues of requests waiting for room, by counter key.
type waiters struct {
	max     int64
	waiting atomic.Int64
	mu      sync.Mutex
	queues  map[string]*waitQueue
}

// waitQueue is the requests waiting on one counter, in order of
// arrival; the first is the one that asks the store.
type waitQueue struct {
	list []*waiter
}

// waiter is one waiting request; turn is closed when it comes first.
type waiter struct {
	turn chan struct{}
}

func newWaiters(max int) *waiters {
	if max == 0 {
		max = DefaultMaxWaiting
	}
	return &waiters{max: int64(max), queues: map[string]*waitQueue{}}
}

// join adds a waiter at the end of key's queue; it is first when the
// queue was empty.
func (ws *waiters) join(key string) *waiter {
	w := &waiter{turn: make(chan struct{})}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	if q == nil {
		q = &waitQueue{}
		ws.queues[key] = q
	}
	q.list = append(q.list, w)
	if len(q.list) == 1 {
		close(w.turn)
	}
	return w
}

// leave removes w from key's queue and, when it was first, hands the turn
// to the next.
func (ws *waiters) leave(key string, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	if q == nil {
		return
	}
	for i, x := range q.list {
		if x != w {
			continue
		}
		q.list = append(q.list[:i], q.list[i+1:]...)
		if i == 0 && len(q.list) > 0 {
			close(q.list[0].turn)
		}
		break
	}
	if len(q.list) == 0 {
		delete(ws.queues, key)
	}
}

// Waiting returns the number of requests waiting for room.
func (h *Handler) Waiting() int64 { return h.waits.waiting.Load() }

// waitForRoom makes a request that decide refused wait for room when the
// limits that refused it allow (maxDelay), and decides it again; it
// leaves sc's decision as the last one made. It waits on the real clock
// (time.Now, timers), whatever clock the store decides on.
func (h *Handler) waitForRoom(r *http.Request, sc *scratch) {
	budget, wait, key, ok := waitable(sc)
	if !ok || wait > budget {
		return
	}
	ws := h.waits
	if ws.waiting.Add(1) > ws.max {
		ws.waiting.Add(-1)
		return
	}
	defer ws.waiting.Add(-1)
	start := time.Now()
	if sc.o.Span != nil {
		defer func() { tracing.Waited(sc.o.Span, time.Since(start)) }()
	}
	w := ws.join(key)
	defer ws.leave(key, w)
	// First at once: the decision just made stands, and the wait it
	// gave is slept first.
	var alone bool
	select {
	case <-w.turn:
		alone = true
	default:
	}
	ctx := r.Context()
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	select {
	case <-w.turn:
	case <-ctx.Done():
		return
	case <-deadline.C:
		return
	}
	// decide decides at the request's start; a decision after waiting is
	// at the instant it is made, and the outcome keeps its start.
	arrived := sc.o.Start
	defer func() { sc.o.Start = arrived }()
	for first := true; ; first = false {
		if !first || !alone {
			// Ask again once first in the queue: those before may have
			// left room, or taken it.
			sc.o.Start = h.now()
			h.decide(r, sc)
			if sc.o.Decision != observe.DecisionLimited {
				return
			}
			var ok bool
			if _, wait, _, ok = waitable(sc); !ok || time.Since(start)+wait > budget {
				return
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// waitable returns, for a request the limits in sc refused, the shortest
// maxDelay of the limits that refused it, the longest time until they
// have room, and the counter of the limit that needs it; ok is false
// when one of them has no maxDelay or never has room (a limit of 0).
func waitable(sc *scratch) (budget, wait time.Duration, key string, ok bool) {
	o := &sc.o
	budget = -1
	for i := range len(o.Limits()) {
		cl, res := sc.lims[i], &sc.res[i]
		if res.Allowed || cl.Shadow {
			continue
		}
		if cl.MaxDelay <= 0 || cl.Params.Limit == 0 {
			return 0, 0, "", false
		}
		if budget < 0 || cl.MaxDelay < budget {
			budget = cl.MaxDelay
		}
		if res.RetryAfter >= wait {
			wait, key = res.RetryAfter, sc.reqs[i].Key
		}
	}
	return budget, wait, key, budget >= 0
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
