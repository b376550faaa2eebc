package proxy

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/logthrottle"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// verdict is who decided a request's limits: the store, or, when it
// failed, --fail-mode.
type verdict uint8

const (
	// storeDecided: the store decided.
	storeDecided verdict = iota
	// localDecided: the store failed, and the memory store decided on the
	// limits' local shares (FailLocal).
	localDecided
	// failedOpen: the store failed, and the request goes on undecided
	// (FailOpen, or FailLocal when the memory store failed too).
	failedOpen
	// failedClosed: the store failed, and the request is refused
	// (FailClosed).
	failedClosed
)

// failover is the handler's stores behind --fail-mode (docs/fleet.md,
// "Redis: one limit for a fleet of gateways"): rate limits are decided by
// store, concurrency slots taken in slots, and when either fails it is
// here, and only here, that the mode decides what the request gets. The
// handler labels the verdict; it never looks at a store error itself.
// It is safe for concurrent use.
type failover struct {
	failMode FailMode
	store    limit.Store
	slots    limit.Slots
	// local and localSlots decide under FailLocal, with each limit
	// scaled by the local share (ruleset.Limit.local and concLocal).
	local      limit.Store
	localSlots limit.Slots
	logger     *slog.Logger
	// errLog keeps an outage, which fails every request, to one line a
	// second.
	errLog logthrottle.Throttle
}

// allow decides reqs as limit.Store's Allow does, on the store; when it
// fails, as the mode says: under FailLocal on the local store, each
// request with the local params of lims[i], without changing reqs (a
// request decided again after waiting for room asks the store again).
// res holds the results only for storeDecided and localDecided.
func (f *failover) allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result, lims []*ruleset.Limit) (bool, verdict) {
	allowed, err := f.store.Allow(ctx, now, reqs, res)
	if err == nil {
		return allowed, storeDecided
	}
	f.logError(ctx, err)
	switch f.failMode {
	case FailClosed:
		return false, failedClosed
	case FailLocal:
		var local [maxLimitsPerRequest]limit.Request
		lreqs := local[:len(reqs)]
		for i := range reqs {
			lreqs[i] = localRequest(reqs[i], lims[i])
		}
		allowed, lerr := f.local.Allow(ctx, now, lreqs, res)
		if lerr == nil {
			if allowed {
				// The fleet counts it once: Redis may have counted the
				// call it did not answer in time, else it is written back.
				limit.AdmittedLocally(err)
			}
			return allowed, localDecided
		}
	}
	// Fail open: a broken limiter must not take the service down.
	return true, failedOpen
}

// charge counts charges and releases after the fact (limit.Request's
// Charge and Release) on the store that decided the request: the local
// one, with the local params, when v is localDecided. A failed charge is the
// caller's to report; no fail mode applies to it.
func (f *failover) charge(ctx context.Context, now time.Time, v verdict, reqs []limit.Request, lims []*ruleset.Limit, res []limit.Result) error {
	if v != localDecided {
		_, err := f.store.Allow(ctx, now, reqs, res)
		return err
	}
	for i := range reqs {
		reqs[i] = localRequest(reqs[i], lims[i])
	}
	_, err := f.local.Allow(ctx, now, reqs, res)
	return err
}

// localRequest returns q with cl's params of --fail-mode local.
func localRequest(q limit.Request, cl *ruleset.Limit) limit.Request {
	q.Params = &cl.Local
	return q
}

// acquire takes a slot of each of reqs as limit.Slots' Acquire does, in
// slots; when that fails, as the mode says: under FailLocal in the local
// slots, each with the local share of conc[i]'s concurrency. permit and
// full are the Acquire's for storeDecided and localDecided.
func (f *failover) acquire(ctx context.Context, reqs []limit.SlotRequest, conc []*ruleset.Limit) (permit limit.Permit, full int, v verdict) {
	permit, full, err := f.slots.Acquire(ctx, reqs)
	if err == nil {
		return permit, full, storeDecided
	}
	f.logError(ctx, err)
	switch f.failMode {
	case FailClosed:
		return nil, -1, failedClosed
	case FailLocal:
		var local [maxLimitsPerRequest]limit.SlotRequest
		lreqs := local[:len(reqs)]
		for i := range reqs {
			lreqs[i] = reqs[i]
			lreqs[i].Limit = conc[i].ConcLocal
		}
		if permit, full, err = f.localSlots.Acquire(ctx, lreqs); err == nil {
			return permit, full, localDecided
		}
	}
	// Fail open: forwarded without a slot.
	return nil, -1, failedOpen
}

// logError logs a store error, at most once a second, unless the caller
// went away or the circuit breaker is open (the breaker's opening was
// logged).
func (f *failover) logError(ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, limit.ErrCircuitOpen) || !f.errLog.Allow(time.Now()) {
		return
	}
	f.logger.Error("limiter failed; deciding by --fail-mode (logged at most once a second)",
		"err", err, "fail_mode", f.failMode.String())
}
