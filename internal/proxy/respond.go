package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
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

// writeLimited writes the limited response body of DESIGN §4:
// {"error":"rate_limited","app":…,"api":…,"limit":…,"window":…,"retryAfterSeconds":…}.
func writeLimited(w http.ResponseWriter, status int, cl *compiledLimit, retryAfter int64) {
	lim := cl.params.Limit
	writeJSON(w, status, errorBody{
		Error:             "rate_limited",
		App:               &cl.app,
		API:               &cl.api,
		Limit:             &lim,
		Window:            cl.params.Window.String(),
		RetryAfterSeconds: &retryAfter,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Every body is built from plain strings and integers.
		panic("proxy: marshaling a response body: " + err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
