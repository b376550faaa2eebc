package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// The write-backs (docs/fleet.md, "When Redis fails"): the local
// admissions and acts that late.go journals, queued and sent to Redis
// (flushOnce) once it answers again, each counted once.

// writeBacks are the local admissions waiting to be counted in Redis
// (lateCall), at most maxWriteBacks, in queue; busy is set while a flush
// runs, in group. written and dropped count them. retry is the breaker's
// backoff: a flush it refused runs again after it (timer set
// meanwhile). lateWaiting counts the calls in flight whose callers
// stopped waiting (lateCall) and whose answers are not in yet.
type writeBacks struct {
	mu          sync.Mutex
	queue       []pendingWrite
	busy, again atomic.Bool
	closed      bool // guarded by mu
	done        bool // the last flush has run (Close); guarded by mu
	group       sync.WaitGroup
	written     atomic.Int64
	dropped     atomic.Int64
	retry       time.Duration
	timer       atomic.Bool
	lateWaiting atomic.Int64
}

// maxWriteBacks is the most local admissions a Redis store keeps to write
// back while Redis does not answer.
const maxWriteBacks = 4096

// pendingWrite is what Redis has still to count of acts a gateway decided
// alone: reqs (charges and releases), at the store's clock at (ns) and
// the gateway's clock now. Once sent, it keeps its memo, so that Redis
// counts it once however often it goes (memo.go), and when it was first
// sent (sent, ns; 0 before); call is its last send while in flight, whose
// answer comes after the flush stopped waiting for it. One that goes
// under the memo of the call it follows (lateCall) has that memo from
// the start, and until, the last instant (ns) a send of it may begin; 0
// for others. One whose call went in one script call with others has
// probe, that batch's memo, until Redis says whether it keeps it, and
// until.
type pendingWrite struct {
	at    int64
	now   time.Time
	reqs  []limit.Request
	memo  memo
	sent  int64
	call  *lateCall
	until int64
	probe memo
}

// maxWriteBackMemo is the longest Redis keeps the memo of a write-back
// beyond memoLife, and so the longest after its first send that a
// write-back whose fate is unknown goes again: its limits' shortest
// window, at most this.
const maxWriteBackMemo = time.Hour

// writeBackLife returns how long Redis keeps the memo of a write-back of
// reqs: as long as it may go again (maxWriteBackMemo), and the bound of
// a call more.
func (r *Store) writeBackLife(reqs []limit.Request) time.Duration {
	return min(shortestWindow(reqs), maxWriteBackMemo) + r.memoLife()
}

// writeBack counts ws in Redis, now or, while Redis does not answer,
// when its node's breaker closes, unless the shortest window of one has
// passed meanwhile (its count would weigh on no request: shortestWindow).
func (r *Store) writeBack(ws []pendingWrite) {
	r.wb.mu.Lock()
	for _, w := range ws {
		if len(r.wb.queue) < maxWriteBacks && !r.wb.done {
			r.wb.queue = append(r.wb.queue, w)
		} else {
			r.wb.dropped.Add(1)
		}
	}
	r.wb.mu.Unlock()
	r.flushWriteBacks()
}

// flushWriteBacks sends the pending write-backs in the background, one
// flush at a time; a flush asked for while one runs runs after it.
func (r *Store) flushWriteBacks() {
	r.wb.again.Store(true)
	r.wb.mu.Lock()
	defer r.wb.mu.Unlock()
	if r.wb.closed || !r.wb.busy.CompareAndSwap(false, true) {
		return
	}
	r.wb.group.Go(func() {
		for r.wb.again.Swap(false) {
			r.flushOnce(false, time.Time{})
		}
		// Under mu, as busy is set and the queue taken and refilled: one
		// look at both under mu sees a flush running, or what it left.
		r.wb.mu.Lock()
		r.wb.busy.Store(false)
		r.wb.mu.Unlock()
		if r.wb.again.Load() {
			r.flushWriteBacks() // asked for between the last flush and now
		}
	})
}

// flushOnce sends the pending write-backs. Those its node's breaker
// refuses, or that could not connect, wait for it to close, unless this
// is the last flush (Close): a flush that runs while the store closes
// keeps them for that one. One whose fate is unknown (its connection
// closed, or its round trip failed, after it was sent) goes again with
// its memo, which Redis counts once (memo.go), while Redis keeps that; one
// still in flight waits for its answer. One that follows a call of
// unknown fate (lateCall) goes only while Redis keeps that call's memo
// (until); if the call went in one script call with others, once Redis
// said whether it keeps their batch's memo (probe: one look per batch
// and flush, and none after one failed, so that a Redis that does not
// answer holds the flush up once).
//
// A flush with a deadline (until, not zero: Close's) sends nothing once
// it has passed, and bounds each call by it.
func (r *Store) flushOnce(last bool, until time.Time) {
	r.wb.mu.Lock()
	pending := r.wb.queue
	r.wb.queue = nil
	r.wb.mu.Unlock()
	var again []pendingWrite
	probed := map[string]bool{}
	var probeErr error
	for _, w := range pending {
		if r.clock()-w.at > int64(shortestWindow(w.reqs)) {
			r.wb.dropped.Add(1)
			continue
		}
		if w.call != nil {
			// Its last send is in flight, or was: what Redis did with it
			// tells whether it goes again. A send after one that may
			// still run could run before it.
			switch w.call.outcomeOf() {
			case latePending:
				if last {
					r.wb.dropped.Add(1)
				} else {
					again = append(again, w)
				}
				continue
			case lateCounted:
				r.wb.written.Add(1)
				continue
			case lateUnknown:
				if !w.call.closedOf() {
					// It timed out: it may still wait in Redis's socket
					// buffer, and run after a send again, which it would
					// not see (a first send looks for no memo).
					r.wb.dropped.Add(1)
					continue
				}
				w.memo.again = true
			}
			w.call = nil
		}
		if !until.IsZero() && !time.Now().Before(until) {
			if last {
				r.wb.dropped.Add(1)
			} else {
				again = append(again, w)
			}
			continue
		}
		if w.until != 0 && r.clock() > w.until {
			// Redis may have forgotten the memo of the call it follows:
			// never twice.
			r.wb.dropped.Add(1)
			continue
		}
		if w.probe.key != "" {
			// One look per batch and flush; none after one failed.
			kept, ok := probed[w.probe.id]
			if !ok && probeErr == nil {
				ctx, cancel := r.flushContext(until)
				kept, probeErr = r.client.HExists(ctx, w.probe.key, w.probe.id).Result()
				cancel()
				ok = probeErr == nil
				if ok {
					probed[w.probe.id] = kept
				}
			}
			switch {
			case !ok && last:
				r.wb.dropped.Add(1)
			case !ok:
				again = append(again, w)
			case kept:
				// The batch ran, and counted.
				r.wb.written.Add(1)
			}
			if !ok || kept {
				continue
			}
			// The batch did not run, or counted nothing: a write-back of
			// its own, with a memo of its own.
			w.probe, w.until = memo{}, 0
		}
		// One counter named twice is counted twice, in one request
		// (limit.Merge), as the decision counted it.
		reqs := limit.Merge(w.reqs).Reqs
		keys, tag, _, err := redisKeys(reqs)
		if err != nil {
			continue
		}
		if w.memo.key == "" {
			w.memo = memoFor(reqs, r.writeBackLife(w.reqs))
		}
		if w.sent == 0 {
			w.sent = r.clock()
		}
		args := r.scriptArgs(w.now, reqs, tag, nil)
		ctx, cancel := r.flushContext(until)
		_, err = r.decideMemo(ctx, w.memo, keys, reqs, args, make([]limit.Result, len(reqs)))
		cancel()
		var le *lateError
		lateErr := errors.As(err, &le)
		switch {
		case err == nil, w.until != 0 && errors.As(err, new(replyShapeError)):
			// Counted; or, sent under the memo of the call it follows,
			// answered with that call's reply: the call counted.
			r.wb.written.Add(1)
		case last:
			// Refused, or its fate unknown, in the last flush.
			r.wb.dropped.Add(1)
		case lateErr && le.call.notCounted():
			// Not sent: again when the breaker closes, or in the last
			// flush.
			again = append(again, w)
		case r.clock()-w.sent >= int64(min(shortestWindow(w.reqs), maxWriteBackMemo)):
			// Its fate is unknown, and Redis may have forgotten its memo:
			// never twice.
			r.wb.dropped.Add(1)
		case lateErr:
			// In flight still (its answer comes to le.call), or its fate
			// unknown: again, with its memo.
			w.call = le.call
			again = append(again, w)
		default:
			// Its fate is unknown: again, with its memo.
			w.memo.again = true
			again = append(again, w)
		}
	}
	if len(again) > 0 {
		r.wb.mu.Lock()
		r.wb.queue = append(again, r.wb.queue...)
		r.wb.mu.Unlock()
		// The breaker closes only when a call gets through: with no
		// request to probe Redis, the write-backs try again after its
		// backoff, themselves the probe.
		if r.wb.timer.CompareAndSwap(false, true) {
			time.AfterFunc(r.wb.retry, func() {
				r.wb.timer.Store(false)
				r.flushWriteBacks()
			})
		}
	}
}

// flushContext returns the context of one call of a flush: the bound of
// a call, or until if sooner (not zero).
func (r *Store) flushContext(until time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(r.wait.call)
	if !until.IsZero() && until.Before(d) {
		d = until
	}
	return context.WithDeadline(context.Background(), d)
}

// awaitLate waits, for Close, until the calls whose callers stopped
// waiting have their answers, or until deadline (their round trips end
// within the bound of a call): what each answer says must still be
// written back (a local admission Redis did not count, the acts of a
// call it never ran) is queued then, for the last flush; closing the
// client under them would leave their fate unknown, and their
// write-backs unsent.
func (r *Store) awaitLate(deadline time.Time) {
	if r.wb.lateWaiting.Load() <= 0 {
		return
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for r.wb.lateWaiting.Load() > 0 && time.Now().Before(deadline) {
		<-t.C
	}
}

// lastFlush sends the write-backs still pending when the store closes,
// their last chance, for up to the bound of a call: the first goes as a
// probe even during the breaker's backoff, and the flush waits for its
// answer, not only as long as a caller would; once the probe gets
// through (a Redis back within that bound), the others follow. What is
// still pending then is dropped, and counted.
func (r *Store) lastFlush() {
	deadline := time.Now().Add(r.wait.call)
	for r.writeBacksPending() && time.Now().Before(deadline) {
		r.nodes.probeNow()
		r.flushOnce(false, deadline)
		if r.wb.lateWaiting.Load() > 0 {
			r.awaitLate(deadline)
			continue
		}
		if r.writeBacksPending() {
			// Refused at once (a refused connection): again after the
			// breaker's backoff, not in a loop.
			t := time.NewTimer(min(r.wb.retry, max(time.Until(deadline), 0)))
			<-t.C
		}
	}
	r.flushOnce(true, deadline)
	r.wb.mu.Lock()
	r.wb.done = true // a write-back queued from now on is dropped (writeBack)
	r.wb.mu.Unlock()
}

// writeBacksPending reports whether write-backs wait in the queue.
func (r *Store) writeBacksPending() bool {
	r.wb.mu.Lock()
	defer r.wb.mu.Unlock()
	return len(r.wb.queue) > 0
}

// shortestWindow returns the shortest span of reqs' limits in which a
// count still weighs on the requests after it: the window (a fixed
// window's count is gone when it ends, a sliding window's once the window
// has slid past it, a bucket has refilled what it took). A write-back
// past it would count for nothing the requests after it need. One within
// it is counted when Redis counts it, not when it was admitted: a
// sliding window's then weighs up to that delay longer than it would
// have, which refuses, never admits, more (dropping it once its bucket
// had ended let the window admit it again: up to twice the limit).
func shortestWindow(reqs []limit.Request) time.Duration {
	d := time.Duration(1<<63 - 1)
	for _, q := range reqs {
		d = min(d, q.Params.Window)
	}
	return d
}
