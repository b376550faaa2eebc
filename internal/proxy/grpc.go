package proxy

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// This file answers gRPC clients in gRPC's terms. A gRPC library reads an
// HTTP status other than 200 through the HTTP-to-gRPC mapping
// (https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md),
// which turns the gateway's 429 into UNAVAILABLE, a status most clients
// retry at once. A request with Content-Type application/grpc (or
// application/grpc+proto, …; not grpc-web, which carries its status in
// the body) that the gateway refuses is answered as a gRPC server answers
// a call it fails before any message: HTTP 200, Content-Type
// application/grpc, grpc-status and grpc-message in the headers
// ("Trailers-Only", https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md),
// with the retry delay as grpc-retry-pushback-ms (gRFC A6), as a
// google.rpc.RetryInfo in grpc-status-details-bin, and in Retry-After.

// isGRPC reports whether r is a gRPC call.
func isGRPC(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	if len(ct) != 1 {
		return false
	}
	v := ct[0]
	if !strings.HasPrefix(v, "application/grpc") {
		return false
	}
	rest := v[len("application/grpc"):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// grpcWriter turns a response the gateway refuses with (any final status
// but 200: a gRPC server always answers 200) into a gRPC status. The
// refusal is written when its body is, or by finish when it has none;
// the body itself is dropped, its reason kept as grpc-message. A response
// with status 200, the upstream's, passes through untouched.
type grpcWriter struct {
	http.ResponseWriter
	// code is the HTTP status of a refusal not yet written, 0 for none.
	code int
	// done reports whether the refusal was written.
	done bool
}

func (g *grpcWriter) WriteHeader(code int) {
	if g.done || g.code != 0 {
		return
	}
	if code < 200 || code == http.StatusOK {
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.code = code
}

func (g *grpcWriter) Write(b []byte) (int, error) {
	if g.code == 0 && !g.done {
		return g.ResponseWriter.Write(b)
	}
	g.refuse(b)
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection's writer, to
// flush a streamed response.
func (g *grpcWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// finish writes a refusal that had no body.
func (g *grpcWriter) finish() {
	if g.code != 0 && !g.done {
		g.refuse(nil)
	}
}

// refuse writes the refusal of status g.code whose JSON body is body.
func (g *grpcWriter) refuse(body []byte) {
	if g.done {
		return
	}
	g.done = true
	var e ruleset.ErrorBody
	if json.Unmarshal(body, &e) != nil {
		// A refusal in an LLM provider's shape (errorFormat,
		// provider.go): OpenAI's and Anthropic's both hold the message
		// at error.message.
		var p struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &p) == nil {
			e = ruleset.ErrorBody{Message: p.Error.Message}
		}
	}
	code, msg := grpcStatus(g.code, &e)
	h := g.Header()
	delete(h, "Content-Length")
	delete(h, "Cache-Control")
	// A refusal does not end an HTTP/2 connection that carries other
	// calls.
	delete(h, "Connection")
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(int(code))}
	h["Grpc-Message"] = []string{grpcEncodeMessage(msg)}
	if e.Error == "blocked" || firstOf(h["X-Should-Retry"]) == "false" {
		// Never admitted (a provider-shaped refusal says so with
		// X-Should-Retry: false): a negative pushback tells the client
		// not to retry.
		h["Grpc-Retry-Pushback-Ms"] = []string{"-1"}
	} else if ra, err := strconv.ParseInt(firstOf(h["Retry-After"]), 10, 64); err == nil && ra >= 0 {
		d := time.Duration(ra) * time.Second
		h["Grpc-Retry-Pushback-Ms"] = []string{strconv.FormatInt(d.Milliseconds(), 10)}
		st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err == nil {
			if b, err := proto.Marshal(st.Proto()); err == nil {
				h["Grpc-Status-Details-Bin"] = []string{base64.RawStdEncoding.EncodeToString(b)}
			}
		}
	}
	g.ResponseWriter.WriteHeader(http.StatusOK)
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// grpcStatus returns the gRPC code and message of a refusal with HTTP
// status code and body e.
func grpcStatus(code int, e *ruleset.ErrorBody) (codes.Code, string) {
	msg := e.Message
	switch e.Error {
	case "rate_limited":
		// The body's message speaks of its own fields; a gRPC client
		// gets them in the message.
		msg = "rate limited"
		if e.App != nil && e.API != nil && e.Limit != nil {
			msg += ": app " + *e.App + " " + *e.API + " allows " + strconv.FormatInt(*e.Limit, 10) + " per " + e.Window
		}
		if e.RetryAfterSeconds != nil {
			msg += "; retry after " + strconv.FormatInt(*e.RetryAfterSeconds, 10) + "s"
		}
		return codes.ResourceExhausted, msg
	case "blocked":
		return codes.ResourceExhausted, msg
	}
	if msg == "" {
		msg = http.StatusText(code)
	}
	if e.Error != "" {
		msg = e.Error + ": " + msg
	}
	switch code {
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted, msg
	case http.StatusBadRequest:
		return codes.InvalidArgument, msg
	case http.StatusUnauthorized:
		return codes.Unauthenticated, msg
	case http.StatusForbidden:
		return codes.PermissionDenied, msg
	case http.StatusNotFound:
		return codes.Unimplemented, msg
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted, msg
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded, msg
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return codes.Unavailable, msg
	}
	return codes.Unknown, msg
}

// grpcEncodeMessage percent-encodes msg as grpc-message requires: every
// byte outside printable ASCII, and '%'.
func grpcEncodeMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
