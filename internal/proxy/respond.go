package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// errorBody is the JSON body of every response the gateway writes itself.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
	// The fields of a limited response.
	App               *string `json:"app,omitempty"`
	API               *string `json:"api,omitempty"`
	Limit             *int64  `json:"limit,omitempty"`
	Window            string  `json:"window,omitempty"`
	RetryAfterSeconds *int64  `json:"retryAfterSeconds,omitempty"`
}

// writeError writes a JSON error: code is a stable machine-readable word,
// msg says why in a sentence.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: code, Message: msg})
}

// limitedBodyPrefix renders the limited response body of DESIGN §4 up to
// the value of retryAfterSeconds, the only part that changes per request:
// {"error":"rate_limited","app":…,"api":…,"limit":…,"window":…,"retryAfterSeconds":
func limitedBodyPrefix(app, api string, p limit.Params) []byte {
	var zero int64
	body, err := json.Marshal(errorBody{
		Error: "rate_limited", App: &app, API: &api, Limit: &p.Limit,
		Window: p.Window.String(), RetryAfterSeconds: &zero,
	})
	if err != nil {
		panic("proxy: marshaling a limited body: " + err.Error())
	}
	// Cut `0}` off the end.
	return body[:len(body)-2]
}

// writeLimited writes cl's limited response.
func writeLimited(w http.ResponseWriter, status int, cl *compiledLimit, retryAfter int64) {
	body := make([]byte, 0, len(cl.body429)+24)
	body = append(body, cl.body429...)
	body = strconv.AppendInt(body, retryAfter, 10)
	body = append(body, "}\n"...)
	// net/http adds Content-Length itself for a body written at once.
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(status)
	w.Write(body)
}

// Constant header values, shared by every response. Each has len == cap,
// so code that appends to a header value (ReverseProxy does, for upstream
// headers) copies rather than writes into them.
var (
	hdrJSON    = []string{"application/json"}
	hdrNoStore = []string{"no-store"}
)

// smallInts holds the header value of every integer below 4096, so that
// counts, seconds and lengths need no allocation.
var smallInts = func() (t [4096][]string) {
	for i := range t {
		t[i] = []string{strconv.Itoa(i)}
	}
	return t
}()

// intHeader returns the header value of n.
func intHeader(n int64) []string {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return []string{strconv.FormatInt(n, 10)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Every body is built from plain strings and integers.
		panic("proxy: marshaling a response body: " + err.Error())
	}
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Cache-Control"] = hdrNoStore
	h["Content-Length"] = intHeader(int64(len(body) + 1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
