package server

import (
	"cmp"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"
)

// DemoUpstream is the built-in upstream of --demo-upstream: it answers
// every request with a small JSON echo of what it received, so a new user
// can see the gateway work with nothing else running. A request whose
// JSON body names a "model" is answered as an LLM API would, with the
// model and a usage (demoUsage), so that token and money budgets can be
// tried too.
type DemoUpstream struct {
	// URL is the upstream's base URL.
	URL string
	srv *http.Server
}

// StartDemoUpstream starts a DemoUpstream on a free loopback port. It
// echoes exactly what reaches it: the method, path, query, Host and
// headers the gateway forwarded.
func StartDemoUpstream() (*DemoUpstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			echo := map[string]any{
				"upstream": "demo",
				"method":   r.Method,
				"path":     r.URL.Path,
				"query":    r.URL.RawQuery,
				"host":     r.Host,
				"headers":  r.Header,
			}
			demoUsage(r, echo)
			json.NewEncoder(w).Encode(echo)
		}),
	}
	go srv.Serve(l)
	return &DemoUpstream{URL: "http://" + l.Addr().String(), srv: srv}, nil
}

// Close stops the upstream.
func (d *DemoUpstream) Close() error { return d.srv.Close() }

// demoUsage adds to the echo of a request whose JSON body names a model
// the model and the usage an LLM API would report: a prompt of one
// token per 4 bytes of the body, and the body's max_tokens (or
// max_output_tokens) as the output, 16 without one. /v1/messages and
// /v1/responses report input_tokens and output_tokens, as Anthropic's
// Messages API and OpenAI's Responses API do; other paths
// prompt_tokens, completion_tokens and total_tokens, as Chat Completions.
func demoUsage(r *http.Request, echo map[string]any) {
	if r.Body == nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	var req struct {
		Model     string `json:"model"`
		MaxTokens *int64 `json:"max_tokens"`
		MaxOutput *int64 `json:"max_output_tokens"`
	}
	if json.Unmarshal(body, &req) != nil || req.Model == "" {
		return
	}
	in, out := (int64(len(body))+3)/4, int64(16)
	if m := cmp.Or(req.MaxTokens, req.MaxOutput); m != nil && *m >= 0 {
		out = *m
	}
	echo["model"] = req.Model
	if r.URL.Path == "/v1/messages" || r.URL.Path == "/v1/responses" {
		echo["usage"] = map[string]int64{"input_tokens": in, "output_tokens": out}
		return
	}
	echo["usage"] = map[string]int64{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
}
