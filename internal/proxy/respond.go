package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// WriteError writes a JSON error: code is a stable machine-readable word,
// msg says why in a sentence. Every error the gateway answers itself, on
// either port, goes through it.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, ruleset.ErrorBody{Error: code, Message: msg})
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

// WriteJSON writes v as a JSON response that is not to be cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
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
