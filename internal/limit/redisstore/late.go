package redisstore

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// lateCall is a script call that Redis did not answer in time, so that
// its request may be decided locally (--fail-mode local): if it is, the
// fleet's count must include it once (docs/fleet.md, "When Redis fails"). The
// call either never reached Redis (it waited in a queue, its node's
// breaker was open, no connection was free), or it is in flight and its
// answer, when it comes, says whether Redis counted it. A request
// admitted locally that Redis did not count is written back: counted in
// Redis as a charge of its cost on every limit that would have counted
// it (a new caller's past the key budget on its overflow counter).
//
// When its round trip failed after it was sent (its fate unknown: Redis
// may have run it), the write-back goes under the memo the call went
// with, marked as sent again (memo.go): Redis answers the reply it kept
// if the call ran and counted, and counts the charge only if it did not.
// That is exact while Redis keeps the memo: every send of the write-back
// begins within its life less the bound of a call after the call's round
// trip began (until), else it is dropped. It is dropped too when the
// round trip timed out (a call that timed out is never sent again: it
// may still wait in Redis's socket buffer, and run after the write-back).
// A call that went in one script call with others has no memo of its
// own: the batch's, which another's write-back would find. Its
// write-back first looks whether Redis keeps the batch's memo (probe):
// if so, the batch ran and counted, the call too; else it goes as a
// write-back of its own, as if Redis had not counted the call.
//
// The call's own charges and releases (limit.Request's Charge and
// Release: the acts after a request, sent once its response is known)
// are journaled whatever the fail mode, and whoever decided the request
// they follow: written back if Redis did not run the call; if its fate
// is unknown and each of its sends closed with its connection, again
// under its batch's memo (probed) or, for a call of acts alone, its own,
// as a local admission is; otherwise, its releases only (a charge is
// never counted twice; a hold nobody releases would stay held, see
// followed).
type lateCall struct {
	r  *Store
	mu sync.Mutex
	// outcome is what Redis did with the call; local reports that the
	// request was admitted locally; done that it was written back, or
	// need not be.
	outcome lateOutcome
	local   bool
	done    bool
	// ran reports that Redis answered the call: it ran, whatever it
	// decided; actsDone that the call's own charges and releases are
	// journaled, or need not be.
	ran      bool
	actsDone bool
	// follows are the acts that followed the local admission
	// (limit.Alone), until what Redis did is known.
	follows []pendingWrite
	// The call: its requests and the gateway's instant, set by Allow.
	now  time.Time
	reqs []limit.Request
	at   int64 // when it was decided locally, ns since the epoch
	sent int64 // when Redis failed to decide it, ns since the epoch
	// v is Redis's answer, once in; lease, set by the caller, the limits
	// the call asked leases for (leasedLate).
	v     []int64
	lease *lateLease
	// memo is the memo the call went under (sentUnder), together
	// whether that is its batch's, in one script call with others; first
	// when its round trip began, ns since the epoch; closed, for a fate
	// unknown, that its round trip ended with its connection closed, not
	// a timeout (closedFate).
	memo     memo
	together bool
	first    int64
	closed   bool
}

// lateOutcome is what Redis did with a late call.
type lateOutcome int

const (
	latePending    lateOutcome = iota // in flight
	lateCounted                       // Redis admitted it: counted
	lateNotCounted                    // never sent, refused, or denied
	lateUnknown                       // the round trip failed: it may have run
)

// answered records Redis's answer to the call, in flight when its caller
// stopped waiting.
func (lc *lateCall) answered(v []int64, err error) {
	o := lateUnknown
	switch {
	case err == nil && len(v) > 0 && v[0] == 1:
		o = lateCounted
	case err == nil, isScriptError(err), notSent(err):
		o = lateNotCounted
	}
	lc.mu.Lock()
	lc.outcome, lc.ran, lc.closed = o, err == nil, closedFate(err)
	if o == lateCounted {
		lc.v = v
	}
	lc.mu.Unlock()
	lc.settle()
	lc.giveBackLeased()
	lc.r.wb.lateWaiting.Add(-1) // last: what the answer says is under way
}

// closedFate reports whether err, the failure of a call's round trip
// after it was sent, says that no send of it may still run in Redis: the
// connection of each was closed (isClosedConn), and a send again was
// refused (resentError). A call that timed out may still wait in
// Redis's socket buffer.
func closedFate(err error) bool {
	var re resentError
	return isClosedConn(err) || errors.As(err, &re)
}

// sentUnder records the memo m the call went under (together: its
// batch's), in a round trip begun at first.
func (lc *lateCall) sentUnder(m memo, first int64, together bool) {
	lc.mu.Lock()
	lc.memo, lc.first, lc.together = m, first, together
	lc.mu.Unlock()
}

// notCounted reports whether Redis is known not to have counted the call.
func (lc *lateCall) notCounted() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.outcome == lateNotCounted
}

// admittedLocally records that the call's request was admitted locally.
func (lc *lateCall) admittedLocally() {
	lc.mu.Lock()
	lc.local, lc.at = true, lc.r.clock()
	lc.mu.Unlock()
	lc.settle()
}

// follow records acts that follow the local admission of the call's
// request (limit.Alone): its charges, and the releases of what it held.
func (lc *lateCall) follow(now time.Time, reqs []limit.Request) {
	lc.mu.Lock()
	lc.follows = append(lc.follows, pendingWrite{at: lc.r.clock(), now: now, reqs: slices.Clone(reqs)})
	lc.mu.Unlock()
	lc.settle()
}

// settle journals what the fleet must still count of the call once what
// Redis did with it is known (or known to be unknowable): its own
// charges and releases, unless Redis ran it; and once it is known to be
// admitted locally, the admission, if Redis did not count it, and the
// acts that followed it.
func (lc *lateCall) settle() {
	lc.mu.Lock()
	if lc.outcome == latePending || lc.reqs == nil {
		lc.mu.Unlock()
		return
	}
	var out []pendingWrite
	if !lc.actsDone {
		lc.actsDone = true
		q := acts(lc.reqs)
		switch {
		case lc.ran || len(q) == 0:
		case lc.outcome == lateUnknown && lc.memo.key != "" && lc.closed && (lc.together || len(q) == len(lc.reqs)):
			// Each send closed with its connection: again, as a local
			// admission is. Alone, only a call of acts alone: one with
			// more has its admission written back under its memo too
			// (below), and two write-backs under one memo would count
			// only the first.
			out = append(out, lc.again(lc.sent, q))
		default:
			charged := lc.outcome == lateNotCounted
			if !charged && slices.ContainsFunc(q, func(x limit.Request) bool { return x.Act == limit.Charge }) {
				// Its charges may still run in Redis, or never: sent
				// again they could count twice, so they are dropped,
				// and counted so.
				lc.r.wb.dropped.Add(1)
			}
			if q = followed(q, true, charged); len(q) > 0 {
				out = append(out, pendingWrite{at: lc.sent, now: lc.now, reqs: q})
			}
		}
	}
	if !lc.local {
		lc.mu.Unlock()
		if len(out) > 0 {
			lc.r.writeBack(out)
		}
		return
	}
	if !lc.done {
		lc.done = true
		if q := admission(lc.reqs); len(q) > 0 {
			switch {
			case lc.outcome == lateNotCounted:
				out = append(out, pendingWrite{at: lc.at, now: lc.now, reqs: q})
			case lc.outcome == lateUnknown && lc.memo.key != "" && lc.closed:
				out = append(out, lc.again(lc.at, q))
			case lc.outcome == lateUnknown:
				lc.r.wb.dropped.Add(1)
			}
		}
	}
	for _, f := range lc.follows {
		if f.reqs = followed(f.reqs, lc.outcome != lateNotCounted, true); len(f.reqs) > 0 {
			out = append(out, f)
		}
	}
	lc.follows = nil
	lc.mu.Unlock()
	if len(out) > 0 {
		lc.r.writeBack(out)
	}
}

// again returns the write-back of q, decided at at, for a call whose fate
// is unknown: under the call's memo, marked as sent again (memo.go), so
// that Redis answers the reply it kept if the call ran and counted, and
// counts q only if it did not; for a call that went in one script call
// with others, counted if Redis keeps their batch's memo (probe), else
// sent with a memo of its own. Either goes only while Redis keeps the
// memo of a call that ran (until): its life from the call's first send,
// less the bound of a call.
func (lc *lateCall) again(at int64, q []limit.Request) pendingWrite {
	w := pendingWrite{at: at, now: lc.now, reqs: q,
		until: lc.first + lc.memo.life*int64(time.Millisecond) - int64(lc.r.wait.call)}
	if lc.together {
		w.probe = lc.memo
	} else {
		w.memo = memo{key: lc.memo.key, id: lc.memo.id, life: max(lc.r.writeBackLife(q).Milliseconds(), 1), again: true}
	}
	return w
}

// acts returns the charges and releases among reqs, in a slice of its
// own.
func acts(reqs []limit.Request) []limit.Request {
	var out []limit.Request
	for _, q := range reqs {
		if q.Follows() {
			out = append(out, q)
		}
	}
	return out
}

// admission returns what the local admission of reqs counts in Redis, as
// charges: each request's units, with its Overflow, as the decision had
// it (a new caller past the key budget is counted against its overflow
// counter, not given a counter outside the budget). A deferred request
// counts nothing until its charge; a hold counts nothing, and holds
// nothing in Redis, which never saw it: its charge, if any, follows.
func admission(reqs []limit.Request) []limit.Request {
	var out []limit.Request
	for _, q := range reqs {
		if !q.Counts() {
			continue
		}
		out = append(out, limit.Request{Key: q.Key, Overflow: q.Overflow, Tag: q.Tag, Params: q.Params, Cost: q.Units(), Act: limit.Charge})
	}
	return out
}

// followed returns what acts count in Redis: a charge if charged (for
// acts that followed a local admission, always: its charge is what
// counts), and a release only if Redis may hold what it gives back
// (held: it ran the call that held, or may have). A release Redis may
// not owe gives back at most what is held on the key (never below
// none), and a hold Redis ran and nobody released would stay held as
// long as new holds keep the key alive: when in doubt, it is released.
func followed(reqs []limit.Request, held, charged bool) []limit.Request {
	out := reqs[:0]
	for _, q := range reqs {
		if (q.Act == limit.Charge && charged) || (q.Act == limit.Release && held) {
			out = append(out, q)
		}
	}
	return out
}

// closedOf reports whether the call's round trip, of unknown fate, ended
// with every send's connection closed (closedFate), not a timeout.
func (lc *lateCall) closedOf() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.closed
}

// outcomeOf returns what Redis did with lc, as far as is known.
func (lc *lateCall) outcomeOf() lateOutcome {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.outcome
}

// lateError is an error of Allow for a call Redis did not decide in time,
// with the call, so that a local decision can be written back
// (limit.AdmittedLocally).
type lateError struct {
	err  error
	call *lateCall
}

func (e *lateError) Error() string { return e.err.Error() }

func (e *lateError) Unwrap() error { return e.err }

// AdmittedLocally implements limit.AdmittedLocally for the call of e.
func (e *lateError) AdmittedLocally() limit.Alone {
	e.call.admittedLocally()
	return e.call
}

// Follow implements limit.Alone: acts that follow the local admission.
func (lc *lateCall) Follow(now time.Time, reqs []limit.Request) { lc.follow(now, reqs) }

// lateFor returns err as a lateError for a call of reqs at now that Redis
// did not decide: lc is what became of it (nil: nothing known, a failure
// after the call was sent, so that the call may have run).
func (r *Store) lateFor(err error, lc *lateCall, now time.Time, reqs []limit.Request) error {
	if lc == nil {
		lc = &lateCall{r: r, outcome: lateUnknown}
	}
	lc.mu.Lock()
	lc.now, lc.reqs, lc.sent = now, slices.Clone(reqs), r.clock()
	lc.mu.Unlock()
	lc.settle()
	return &lateError{err: err, call: lc}
}
