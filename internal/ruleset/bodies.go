package ruleset

import (
	"encoding/json"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// ErrorBody is the JSON body of every response the gateway writes itself
// (docs/rules.md, "Responses"): an error and its message, and for a
// limited or blocked response the limit that refused it. The refusal
// bodies are built here, at compile time; package proxy writes the
// others.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
	// The fields of a limited response.
	App               *string `json:"app,omitempty"`
	API               *string `json:"api,omitempty"`
	Limit             *int64  `json:"limit,omitempty"`
	Window            string  `json:"window,omitempty"`
	RetryAfterSeconds *int64  `json:"retryAfterSeconds,omitempty"`
}

// limitedBodyPrefix renders the limited response body (docs/rules.md, "Responses") up to
// the value of retryAfterSeconds, the only part that changes per request:
// {"error":"rate_limited","message":…,"app":…,"api":…,"limit":…,"window":…,"retryAfterSeconds":
func limitedBodyPrefix(app, api string, p limit.Params) []byte {
	var zero int64
	body, err := json.Marshal(ErrorBody{
		Error: "rate_limited", Message: limitedMessage, App: &app, API: &api, Limit: &p.Limit,
		Window: p.Unit(), RetryAfterSeconds: &zero,
	})
	if err != nil {
		panic("ruleset: marshaling a limited body: " + err.Error())
	}
	// Cut `0}` off the end.
	return body[:len(body)-2]
}

// limitedMessage is the message of every limited response.
const limitedMessage = "this caller has reached the limit of this API (or of its app's total when api is empty); retry after retryAfterSeconds seconds, as Retry-After says"

// blockedBody renders the response body of a limit of 0, built once when
// the rules are compiled.
func blockedBody(app, api string, p limit.Params) []byte {
	body, err := json.Marshal(ErrorBody{
		Error: "blocked", App: &app, API: &api, Limit: &p.Limit,
		Message: "this API is blocked for this caller (its limit is 0): no request is admitted, whenever it is sent",
	})
	if err != nil {
		panic("ruleset: marshaling a blocked body: " + err.Error())
	}
	return append(body, '\n')
}
