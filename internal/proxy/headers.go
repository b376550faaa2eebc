package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// The rate-limit headers and the limited response (docs/rules.md, "Responses"):
// RateLimit-Policy and RateLimit of the IETF httpapi draft -10
// (draft-ietf-httpapi-ratelimit-headers), the legacy X-RateLimit-*
// headers, Retry-After, and the JSON body of a 429.

// reject writes the limited response for the denying limit with the
// longest wait. A limit of 0 never admits: its response says "blocked",
// with no Retry-After, since no wait would help.
func (h *Handler) reject(w http.ResponseWriter, lims []*compiledLimit, res []limit.Result) {
	worst := -1
	for i := range res {
		if res[i].Allowed || lims[i].shadow {
			continue
		}
		if lims[i].params.Limit == 0 {
			writeBlocked(w, h.limitStatus, lims[i])
			return
		}
		if worst < 0 || res[i].RetryAfter > res[worst].RetryAfter {
			worst = i
		}
	}
	cl, rr := lims[worst], res[worst]
	secs := ceilSeconds(rr.RetryAfter)
	if secs < 1 {
		secs = 1
	}
	secs += h.jitter()
	w.Header()["Retry-After"] = intHeader(secs)
	writeLimited(w, h.limitStatus, cl, secs)
}

// writeHeaders adds the rate-limit headers of the enforced limits: the
// draft headers list each one, the legacy ones describe the most
// constraining. Shadow limits stay invisible to callers.
func (h *Handler) writeHeaders(hdr http.Header, lims []*compiledLimit, res []limit.Result) {
	if h.headers == HeadersNone {
		return
	}
	most := -1
	for i := range res {
		if lims[i].shadow {
			continue
		}
		if most < 0 || moreConstraining(res[i], res[most]) {
			most = i
		}
	}
	if most < 0 {
		return
	}
	if h.headers == HeadersBoth || h.headers == HeadersDraft {
		hdr["Ratelimit-Policy"] = policyHeader(lims)
		hdr["Ratelimit"] = []string{stateHeader(lims, res)}
	}
	if h.headers == HeadersBoth || h.headers == HeadersLegacy {
		r := res[most]
		if lims[most].params.Limit == 0 {
			// Blocked: no reset to wait for.
			hdr["X-Ratelimit-Limit"], hdr["X-Ratelimit-Remaining"] = smallInts[0], smallInts[0]
			return
		}
		if r.Limit == lims[most].params.Limit {
			hdr["X-Ratelimit-Limit"] = lims[most].limitHdr
		} else {
			hdr["X-Ratelimit-Limit"] = intHeader(r.Limit)
		}
		hdr["X-Ratelimit-Remaining"] = intHeader(max(r.Remaining, 0))
		hdr["X-Ratelimit-Reset"] = intHeader(ceilSeconds(r.Reset))
	}
}

// policyHeader returns the RateLimit-Policy value of the enforced limits,
// precomputed for the usual shapes (one limit, or an app total and a rule).
func policyHeader(lims []*compiledLimit) []string {
	switch {
	case len(lims) == 1 && !lims[0].shadow:
		return lims[0].policyHdr
	case len(lims) == 2 && lims[1].pairPolicy != nil:
		return lims[1].pairPolicy
	case len(lims) == 2 && lims[0].shadow:
		return lims[1].policyHdr
	case len(lims) == 2 && lims[1].shadow:
		return lims[0].policyHdr
	}
	return nil
}

// moreConstraining reports whether a leaves less room than b: fewer
// remaining, then a longer wait.
func moreConstraining(a, b limit.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// stateHeader renders the RateLimit value of the enforced limits with one
// allocation.
func stateHeader(lims []*compiledLimit, res []limit.Result) string {
	var buf [256]byte
	b := buf[:0]
	for i, cl := range lims {
		if cl.shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, cl.name...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(res[i].Remaining, 0), 10)
		if cl.params.Limit == 0 {
			continue // blocked: no reset to wait for
		}
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(res[i].Reset), 10)
	}
	return string(b)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// limitedBodyPrefix renders the limited response body (docs/rules.md, "Responses") up to
// the value of retryAfterSeconds, the only part that changes per request:
// {"error":"rate_limited","message":…,"app":…,"api":…,"limit":…,"window":…,"retryAfterSeconds":
func limitedBodyPrefix(app, api string, p limit.Params) []byte {
	var zero int64
	body, err := json.Marshal(errorBody{
		Error: "rate_limited", Message: limitedMessage, App: &app, API: &api, Limit: &p.Limit,
		Window: p.Unit(), RetryAfterSeconds: &zero,
	})
	if err != nil {
		panic("proxy: marshaling a limited body: " + err.Error())
	}
	// Cut `0}` off the end.
	return body[:len(body)-2]
}

// limitedMessage is the message of every limited response.
const limitedMessage = "this caller has reached the limit of this API (or of its app's total when api is empty); retry after retryAfterSeconds seconds, as Retry-After says"

// writeLimited writes cl's limited response.
func writeLimited(w http.ResponseWriter, status int, cl *compiledLimit, retryAfter int64) {
	body := make([]byte, 0, len(cl.body429)+24)
	body = append(body, cl.body429...)
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
func writeBlocked(w http.ResponseWriter, status int, cl *compiledLimit) {
	w.Header()["Content-Length"] = intHeader(int64(len(cl.bodyBlocked)))
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	w.Write(cl.bodyBlocked)
}

// blockedBody renders the response body of a limit of 0, built once when
// the rules are compiled.
func blockedBody(app, api string, p limit.Params) []byte {
	body, err := json.Marshal(errorBody{
		Error: "blocked", App: &app, API: &api, Limit: &p.Limit,
		Message: "this API is blocked for this caller (its limit is 0): no request is admitted, whenever it is sent",
	})
	if err != nil {
		panic("proxy: marshaling a blocked body: " + err.Error())
	}
	return append(body, '\n')
}
