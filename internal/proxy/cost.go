package proxy

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// This file charges what a request costs once its response is known (the
// docs/rules.md, "Request cost" and "Counting only some responses"): a limit
// whose cost the upstream reports in a header, or that counts only some
// response statuses, admits a request when it has room for its need and
// for the needs of the requests in flight, and holds its need
// (limit.Hold) while it is in flight; when the response's headers
// are written, by the upstream or by the gateway itself (a 502 or 504),
// it is charged (limit.Charge) what the response says and gives
// back what it held (limit.Release), in one store call, so that
// the status counted is the one the client got and the one the access
// log records, and no more requests than the limit's room can be in
// flight at once. The call is made in the background while the headers
// go on to the client, so that no store round trip delays them, and the
// handler waits for it before the request is done.
//
// A client that hangs up does not lower what its request costs. The
// upstream's request is not canceled with the client's until the
// response's headers are in, so that an upstream that still answers is
// charged as if the client had stayed: its reported cost, its status
// counted or not. When the upstream gives no answer after the client
// left (it failed, timed out, or the request's body broke off), nothing
// says what the request cost, and it is charged its worst case: a
// reported cost's max, and a count as a matching status.

// startCharging arms sc's response writer to charge the deferred limits
// of an admitted request when the response's headers are written. It
// reports whether there is any to charge.
func (h *Handler) startCharging(r *http.Request, sc *scratch) bool {
	any := false
	for _, cl := range sc.lims[:sc.n] {
		if cl.Deferred() {
			any = true
			break
		}
	}
	if !any {
		return false
	}
	sc.sw.charge = func(code int) { h.chargeResponse(r, sc, code) }
	return true
}

// chargeResponse charges the deferred limits of sc for a response with
// status code, whose headers are those of sc's writer, and removes the
// cost headers that are not kept. It runs once, before the headers are
// sent, and sends the charges to the store in the background: the
// headers go on to the client while the store answers, and
// settleCharges waits for it when the response has ended.
func (h *Handler) chargeResponse(r *http.Request, sc *scratch, code int) {
	sc.sw.charge = nil
	if sc.sw.up != nil {
		sc.sw.up.answer(r.Context()) // a gone client reads no body
	}
	gone := r.Context().Err() != nil
	worst := gone && sc.sw.upstreamFailed
	o := &sc.o
	hdr := sc.sw.Header()
	for i, cl := range sc.lims[:sc.n] {
		// Only a limit that admitted the request counts it and holds
		// units: not a shadow limit that denied it, nor any when the
		// store failed open (the outcome has no limits). A body cost is charged when the
		// body ends (tokens.go).
		if !cl.Deferred() || cl.BodyCost() || i >= len(o.Limits()) || !o.Limits()[i].Allowed {
			continue
		}
		sc.owed.release(sc.reqs[i], i)
		units := cl.Cost.Need()
		switch name := cl.Cost.Header; {
		case name != "" && worst:
			units = cl.Cost.Max
			o.Limits()[i].CostMissing = true
		case name != "":
			v, ok := reportedCost(hdr[name])
			if ok {
				units = min(v, cl.Cost.Max)
				o.UpstreamCost, o.HasUpstreamCost = v, true
			} else {
				units = cl.Cost.Min
				o.Limits()[i].CostMissing = true
			}
		}
		if !worst && !cl.Count.Matches(code) || units == 0 {
			continue
		}
		sc.owed.charge(sc.reqs[i], i, units)
	}
	for _, cl := range sc.lims[:sc.n] {
		if cl.Cost.Header != "" && !cl.Cost.Keep {
			delete(hdr, cl.Cost.Header)
		}
	}
	ow := &sc.owed
	if ow.n+ow.nr == 0 {
		return
	}
	// The charge is owed whether or not the client is still there.
	ctx, now := context.WithoutCancel(r.Context()), h.now()
	ow.wg.Go(func() { ow.err = h.countOwed(ctx, now, sc, ow) })
}

// owed is what a response's cost counts in the store: the charges, then
// the releases of the units held, sent in one call, so that the request
// is never counted by neither.
type owed struct {
	charges   [maxLimitsPerRequest]limit.Request
	chargeOf  [maxLimitsPerRequest]int // the limit of each charge
	releases  [maxLimitsPerRequest]limit.Request
	releaseOf [maxLimitsPerRequest]int
	n, nr     int
	// wg waits for the call sent in the background (chargeResponse),
	// and err is its error.
	wg  sync.WaitGroup
	err error
}

// charge adds a charge of units to q's limit, the ith of the request.
func (ow *owed) charge(q limit.Request, i int, units int64) {
	q.Cost, q.Act = units, limit.Charge
	ow.charges[ow.n], ow.chargeOf[ow.n] = q, i
	ow.n++
}

// release adds the release of the units q holds, of the ith limit.
func (ow *owed) release(q limit.Request, i int) {
	q.Act = limit.Release
	ow.releases[ow.nr], ow.releaseOf[ow.nr] = q, i
	ow.nr++
}

// countOwed counts ow in the store that decided sc's request.
func (h *Handler) countOwed(ctx context.Context, now time.Time, sc *scratch, ow *owed) error {
	var all [2 * maxLimitsPerRequest]limit.Request
	var lims [2 * maxLimitsPerRequest]*ruleset.Limit
	k := 0
	for j := range ow.n {
		all[k], lims[k] = ow.charges[j], sc.lims[ow.chargeOf[j]]
		k++
	}
	for j := range ow.nr {
		all[k], lims[k] = ow.releases[j], sc.lims[ow.releaseOf[j]]
		k++
	}
	var res [2 * maxLimitsPerRequest]limit.Result
	return h.charge(ctx, now, sc.decidedBy, sc.alone, all[:k], lims[:k], res[:k])
}

// settleCharges completes the charges of an admitted request's response
// once it has ended, however it ended: broken reports whether it broke
// or its client left. It charges the limits whose cost a status or a
// header says, if the response's headers never went through the writer
// (499 for a client that went away, 101 for a protocol switch), and
// waits for those charges; it charges the limits whose cost the body
// reports (tokens.go); and it records what was charged in the outcome.
func (h *Handler) settleCharges(r *http.Request, sc *scratch, t *tokenTap, broken bool) {
	if sc.sw.charge != nil {
		sc.sw.charge(cmp.Or(sc.sw.status, StatusClientClosed))
	}
	var tk owed
	var tkErr error
	if t != nil && h.chargeTokens(sc, t, broken, &tk) && tk.n+tk.nr > 0 {
		tkErr = h.countOwed(context.WithoutCancel(r.Context()), h.now(), sc, &tk)
	}
	ow := &sc.owed
	ow.wg.Wait()
	if ow.n+ow.nr > 0 {
		h.settled(sc, ow, ow.err, false)
	}
	if tk.n+tk.nr > 0 {
		h.settled(sc, &tk, tkErr, true)
	}
}

// settled records in sc's outcome what ow charged, its store call having
// returned err. A failed call of a body cost is a charge error even when
// it only gave units back.
func (h *Handler) settled(sc *scratch, ow *owed, err error, tokens bool) {
	o := &sc.o
	if err != nil {
		o.ChargeError = o.ChargeError || ow.n > 0 || tokens
		h.logChargeError(err)
		for j := range ow.n {
			if i := ow.chargeOf[j]; sc.lims[i].BodyCost() {
				o.Limits()[i].Charged -= ow.charges[j].Cost
			}
		}
		return
	}
	for j := range ow.n {
		if i := ow.chargeOf[j]; !sc.lims[i].BodyCost() {
			o.Limits()[i].Charged = ow.charges[j].Cost
		}
	}
}

// reportedCost reads a cost header's values: one whole number ≥ 0. One
// too large for an int64 is math.MaxInt64, which max caps: an absurd
// report is charged the most, never min.
func reportedCost(vals []string) (int64, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	s := strings.TrimSpace(vals[0])
	v, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) && v > 0 {
		return v, true // ParseInt returns math.MaxInt64
	}
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// chargeFixed records the units counted at decision for the limits of an
// admitted request that set a fixed cost; those without cost or count are
// left out of the cost metrics and the access log's cost.
func chargeFixed(sc *scratch) {
	o := &sc.o
	for i, cl := range sc.lims[:len(o.Limits())] {
		if cl.Cost.Units > 0 && !cl.Deferred() && o.Limits()[i].Allowed {
			o.Limits()[i].Charged = cl.Cost.Units
		}
	}
}

// logChargeError logs a failed charge, at most once a second.
func (h *Handler) logChargeError(err error) {
	if !h.chargeLog.Allow(time.Now()) {
		return
	}
	h.log.Error("charging a response's cost failed; Redis counts it once, late, unless it leaves the call unanswered past the bound of a whole call (docs/fleet.md, A slow Redis costs once; logged at most once a second)", "err", err)
}
