package proxy

import (
	"net/http"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// The rate-limit headers and the limited response (docs/rules.md, "Responses"):
// RateLimit-Policy and RateLimit of the IETF httpapi draft -10
// (draft-ietf-httpapi-ratelimit-headers), the legacy X-RateLimit-*
// headers, Retry-After, and the JSON body of a 429.

// reject writes the limited response for the denying limit with the
// longest wait, in the shape its refusal settings or route's say
// (provider.go). A limit of 0 never admits: its response says "blocked",
// with no Retry-After, since no wait would help.
func (h *Handler) reject(w http.ResponseWriter, route *ruleset.Route, lims []*ruleset.Limit, res []limit.Result) {
	worst := -1
	for i := range res {
		if res[i].Allowed || lims[i].Shadow {
			continue
		}
		if lims[i].Params.Limit == 0 {
			if ref := refusalOf(route, lims[i]); provider(ref.Format) {
				writeProviderBlocked(w, h.limitStatus, ref.Format, lims[i])
				return
			}
			writeBlocked(w, h.limitStatus, lims[i])
			return
		}
		if worst < 0 || res[i].RetryAfter > res[worst].RetryAfter {
			worst = i
		}
	}
	cl, rr := lims[worst], res[worst]
	ref := refusalOf(route, cl)
	secs := retryAfter(rr.RetryAfter, ref) + h.jitter()
	w.Header()["Retry-After"] = intHeader(secs)
	if provider(ref.Format) {
		writeProviderLimited(w, h.limitStatus, ref.Format, cl, secs)
		return
	}
	writeLimited(w, h.limitStatus, cl, secs)
}

// writeHeaders adds the rate-limit headers of the enforced limits: the
// draft headers list each one, the legacy ones describe the most
// constraining. Shadow limits stay invisible to callers.
func (h *Handler) writeHeaders(hdr http.Header, lims []*ruleset.Limit, res []limit.Result) {
	if h.headers == ratelimitheader.None {
		return
	}
	most := -1
	for i := range res {
		if lims[i].Shadow {
			continue
		}
		if most < 0 || ratelimitheader.MoreConstraining(res[i], res[most]) {
			most = i
		}
	}
	if most < 0 {
		return
	}
	if h.headers.Draft() {
		hdr["Ratelimit-Policy"] = policyHeader(lims)
		hdr["Ratelimit"] = []string{stateHeader(lims, res)}
	}
	if h.headers.Legacy() {
		r := res[most]
		if lims[most].Params.Limit == 0 {
			// Blocked: no reset to wait for.
			hdr["X-Ratelimit-Limit"], hdr["X-Ratelimit-Remaining"] = smallInts[0], smallInts[0]
			return
		}
		if r.Limit == lims[most].Params.Limit {
			hdr["X-Ratelimit-Limit"] = lims[most].LimitHdr
		} else {
			hdr["X-Ratelimit-Limit"] = intHeader(r.Limit)
		}
		hdr["X-Ratelimit-Remaining"] = intHeader(max(r.Remaining, 0))
		hdr["X-Ratelimit-Reset"] = intHeader(ratelimitheader.Seconds(r.Reset))
	}
}

// policyHeader returns the RateLimit-Policy value of the enforced limits,
// precomputed for the usual shapes (one limit, or an app total and a rule).
func policyHeader(lims []*ruleset.Limit) []string {
	switch {
	case len(lims) == 1 && !lims[0].Shadow:
		return lims[0].PolicyHdr
	case len(lims) == 2 && lims[1].PairPolicy != nil:
		return lims[1].PairPolicy
	case len(lims) == 2 && lims[0].Shadow:
		return lims[1].PolicyHdr
	case len(lims) == 2 && lims[1].Shadow:
		return lims[0].PolicyHdr
	}
	return nil
}

// stateHeader renders the RateLimit value of the enforced limits with one
// allocation.
func stateHeader(lims []*ruleset.Limit, res []limit.Result) string {
	var buf [256]byte
	b := buf[:0]
	for i, cl := range lims {
		if cl.Shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = ratelimitheader.AppendState(b, cl.Name, res[i].Remaining, res[i].Reset, cl.Params.Limit == 0)
	}
	return string(b)
}

// writeLimited writes cl's limited response.
func writeLimited(w http.ResponseWriter, status int, cl *ruleset.Limit, retryAfter int64) {
	body := make([]byte, 0, len(cl.Body429)+24)
	body = append(body, cl.Body429...)
	body = strconv.AppendInt(body, retryAfter, 10)
	body = append(body, "}\n"...)
	// Set, not left to net/http: a refusal may be sent before the
	// handler returns (closeUnread).
	w.Header()["Content-Length"] = intHeader(int64(len(body)))
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	w.Write(body)
}

// writeBlocked writes the response of a limit of 0: the request can never
// be admitted, so nothing invites a retry.
func writeBlocked(w http.ResponseWriter, status int, cl *ruleset.Limit) {
	w.Header()["Content-Length"] = intHeader(int64(len(cl.BodyBlocked)))
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	w.Write(cl.BodyBlocked)
}
