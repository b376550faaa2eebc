package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// This file charges what a request costs once its response is known (the
// docs/rules.md, "Request cost" and "Counting only some responses"): a limit
// whose cost the upstream reports in a header, or that counts only some
// response statuses, admits a request when it has room for its need and
// for the needs of the requests in flight, and holds its need
// (limit.Request.Hold) while it is in flight; when the response's headers
// are written, by the upstream or by the gateway itself (a 502 or 504),
// it is charged (limit.Request.Charge) what the response says and gives
// back what it held (limit.Request.Release), so that the status counted
// is the one the client got and the one the access log records, and no
// more requests than the limit's room can be in flight at once.
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
// sent.
func (h *Handler) chargeResponse(r *http.Request, sc *scratch, code int) {
	sc.sw.charge = nil
	gone := r.Context().Err() != nil
	if sc.sw.up != nil {
		sc.sw.up.answer(gone) // a gone client reads no body
	}
	worst := gone && sc.sw.upstreamFailed
	o := &sc.o
	hdr := sc.sw.Header()
	// The charges, then the releases of the units held, in one call:
	// the request is never counted by neither.
	var reqs [2 * maxLimitsPerRequest]limit.Request
	var releases [maxLimitsPerRequest]limit.Request
	var idx [maxLimitsPerRequest]int
	n, nr := 0, 0
	for i, cl := range sc.lims[:sc.n] {
		// Only a limit that admitted the request counts it and holds
		// units: not a shadow limit that denied it, nor any when the
		// store failed open (the outcome has no limits). A body cost is charged when the
		// body ends (tokens.go).
		if !cl.Deferred() || cl.BodyCost() || i >= len(o.Limits()) || !o.Limits()[i].Allowed {
			continue
		}
		rel := sc.reqs[i]
		rel.Hold, rel.Release = false, true
		releases[nr] = rel
		nr++
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
		q := sc.reqs[i]
		q.Cost, q.Hold, q.Charge = units, false, true
		reqs[n], idx[n] = q, i
		n++
	}
	for _, cl := range sc.lims[:sc.n] {
		if cl.Cost.Header != "" && !cl.Cost.Keep {
			delete(hdr, cl.Cost.Header)
		}
	}
	store := h.store
	if sc.local {
		store = h.local
	}
	all := append(reqs[:n], releases[:nr]...)
	if len(all) == 0 {
		return
	}
	var res [2 * maxLimitsPerRequest]limit.Result
	// The charge is owed whether or not the client is still there.
	ctx := context.WithoutCancel(r.Context())
	if _, err := store.Allow(ctx, h.now(), all, res[:len(all)]); err != nil {
		o.ChargeError = n > 0
		h.logChargeError(err)
		return
	}
	for j := range n {
		o.Limits()[idx[j]].Charged = reqs[j].Cost
	}
}

// reportedCost reads a cost header's values: one whole number ≥ 0.
func reportedCost(vals []string) (int64, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(vals[0]), 10, 64)
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
	h.log.Error("charging a response's cost failed; the request stays uncounted (logged at most once a second)", "err", err)
}
