package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// This file writes refusals in the shape of an LLM provider's own errors
// (errorFormat: openai | anthropic; docs/plans-and-tokens.md, "Refusals in
// a provider's shape"), so that the provider's SDK raises its rate-limit
// error with the type and code it documents, and caps the Retry-After
// advertised (retryAfterMax).

// refusalOf returns how cl's refusals are written for a request taking
// route (nil for none): cl's own settings, then the route's.
func refusalOf(route *ruleset.Route, cl *ruleset.Limit) config.Refusal {
	if route == nil {
		return cl.Refusal
	}
	return cl.Refusal.Or(route.Refusal)
}

// retryAfter returns the Retry-After, in seconds, of a refusal whose
// limit has room again in d: at least 1, at most ref's RetryAfterMax.
func retryAfter(d time.Duration, ref config.Refusal) int64 {
	secs := max(ratelimitheader.Seconds(d), 1)
	if m := int64(ref.RetryAfterMax / time.Second); m > 0 {
		secs = min(secs, m)
	}
	return secs
}

// provider reports whether f is a provider's shape.
func provider(f config.ErrorFormat) bool {
	return f == config.FormatOpenAI || f == config.FormatAnthropic
}

// openAIError is the body of an OpenAI API error; Param is always null
// here.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// anthropicError is the body of an Anthropic API error.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// limitName says which limit refused, for messages.
func limitName(cl *ruleset.Limit) string {
	api := cl.API
	if api == "" {
		api = "all its APIs"
	}
	return "app " + cl.App + " on " + api + " (" + strconv.FormatInt(cl.Params.Limit, 10) + " per " + cl.Params.Unit() + ")"
}

// writeProviderLimited writes a refusal of cl in format f, whose
// Retry-After is secs. OpenAI's type says what ran out, as OpenAI's
// own 429s do: "tokens" for a limit whose cost the response body reports,
// "requests" for others; its code is rate_limit_exceeded.
func writeProviderLimited(w http.ResponseWriter, status int, f config.ErrorFormat, cl *ruleset.Limit, secs int64) {
	msg := "Rate limit reached for " + limitName(cl) + ". Please try again in " + strconv.FormatInt(secs, 10) + "s."
	if f == config.FormatAnthropic {
		var b anthropicError
		b.Type, b.Error.Type, b.Error.Message = "error", "rate_limit_error", msg
		writeProviderBody(w, status, b)
		return
	}
	var b openAIError
	b.Error.Message, b.Error.Type, b.Error.Code = msg, "requests", "rate_limit_exceeded"
	if cl.BodyCost() {
		b.Error.Type = "tokens"
	}
	writeProviderBody(w, status, b)
}

// writeProviderBlocked writes the refusal of a limit of 0 in format f.
// OpenAI answers a caller that may not use the API at all with
// insufficient_quota; both SDKs are told not to retry (x-should-retry,
// which the official OpenAI and Anthropic SDKs read).
func writeProviderBlocked(w http.ResponseWriter, status int, f config.ErrorFormat, cl *ruleset.Limit) {
	msg := "This API is blocked for " + limitName(cl) + ": no request is admitted, whenever it is sent."
	w.Header()["X-Should-Retry"] = hdrFalse
	if f == config.FormatAnthropic {
		var b anthropicError
		b.Type, b.Error.Type, b.Error.Message = "error", "rate_limit_error", msg
		writeProviderBody(w, status, b)
		return
	}
	var b openAIError
	b.Error.Message, b.Error.Type, b.Error.Code = msg, "insufficient_quota", "insufficient_quota"
	writeProviderBody(w, status, b)
}

var hdrFalse = []string{"false"}

// writeProviderBody writes v as a refusal's JSON body.
func writeProviderBody(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic("proxy: marshaling a refusal body: " + err.Error())
	}
	body = append(body, '\n')
	// Set, not left to net/http: a refusal may be sent before the
	// handler returns (closeUnread).
	w.Header()["Content-Length"] = intHeader(int64(len(body)))
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	w.Write(body)
}
