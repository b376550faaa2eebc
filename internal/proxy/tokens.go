package proxy

import (
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file charges a cost the response body reports, such as the tokens
// of an LLM API (cost: {body: usage.total_tokens}; docs/plans-and-tokens.md).
// The request is admitted holding its reserve (limit.Request.Hold: room
// for it and every unit held, counting none) or, without one, when the
// limit has room for min, counting nothing; the body streams to the
// client untouched while a usage.Meter reads the bytes already sent; when
// the response ends the limit is charged what the response reported
// (capped by max; min when it reported nothing) and the reserve is given
// back in the same store call. A response that broke or was abandoned by
// its client is charged at least the reserve.

// bodyNeed returns what a request r asks of a limit cl with a body cost:
// its reserve, held until the response ends (Hold), or, without one,
// room for min, counted for none (Defer).
func bodyNeed(cl *ruleset.Limit, r *http.Request) (units int64, deferred bool) {
	var vals []string
	if cl.Cost.ReserveHeader != "" {
		vals = r.Header[cl.Cost.ReserveHeader]
	}
	if res := cl.Cost.ReserveFor(vals); res > 0 {
		return res, false
	}
	return cl.Cost.Min, true
}

// tokenTap feeds the bytes of a response sent to the client to a
// usage.Meter, created at the first byte from the response's headers.
type tokenTap struct {
	paths   []usage.Path
	inspect int
	m       *usage.Meter
	// off reports that the body cannot be read: it is compressed.
	off bool
}

func (t *tokenTap) write(hdr http.Header, b []byte) {
	if t.off {
		return
	}
	if t.m == nil {
		if ce := hdr["Content-Encoding"]; len(ce) > 0 && !strings.EqualFold(ce[0], "identity") {
			t.off = true
			return
		}
		var ct string
		if v := hdr["Content-Type"]; len(v) > 0 {
			ct = v[0]
		}
		t.m = usage.NewMeter(t.paths, ct, t.inspect)
	}
	t.m.Write(b)
}

// used ends the body and returns the usage it reported, and whether it
// reported any.
func (t *tokenTap) used() (int64, bool) {
	if t.m == nil {
		return 0, false
	}
	t.m.Close()
	return t.m.Used()
}

// startMetering arms sc's writer to read the usage of the body-cost limits
// that admitted the request. It returns nil when there are none.
func (h *Handler) startMetering(sc *scratch) *tokenTap {
	o := &sc.o
	for i, cl := range sc.lims[:len(o.Limits())] {
		if cl.BodyCost() && o.Limits()[i].Allowed {
			// The limits of one request share its body: one meter reads
			// the paths of the first. Rules that read different fields
			// of one response are not expected.
			t := &tokenTap{paths: cl.Cost.Body, inspect: cl.Cost.Inspect}
			sc.sw.tap = t
			return t
		}
	}
	return nil
}

// chargeTokens adds to ow the charges of the body-cost limits of
// sc, for a response that has ended, whatever way it ended, and the
// releases of the reserves held: each is charged the usage reported
// (capped by max; min when none was), and at least its reserve when the
// response broke or its client left. It reports whether there was any
// such limit; settleCharges counts them.
func (h *Handler) chargeTokens(sc *scratch, t *tokenTap, broken bool, ow *owed) bool {
	sc.sw.tap = nil
	o := &sc.o
	used, seen := t.used()
	any := false
	for i, cl := range sc.lims[:len(o.Limits())] {
		if !cl.BodyCost() || !o.Limits()[i].Allowed {
			continue
		}
		any = true
		q := sc.reqs[i]
		var reserved int64
		if q.Hold {
			reserved = q.Cost
			ow.release(q, i)
		}
		total := cl.Cost.Min
		if seen {
			total = min(used, cl.Cost.Max)
			o.UpstreamCost, o.HasUpstreamCost = used, true
		} else {
			o.Limits()[i].CostMissing = true
		}
		if !cl.Count.Matches(sc.sw.status) {
			total = 0
		}
		if broken {
			total = max(total, reserved)
		}
		o.Limits()[i].Charged, o.Limits()[i].Tokens, o.Limits()[i].Plan = total, true, cl.Plan
		if total > 0 {
			ow.charge(q, i, total)
		}
	}
	return any
}
