package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// This file reads the fields of a request's JSON body that limits count by
// (by: body:model; docs/plans-and-tokens.md, "Keys from the request body").
// The body is read once, at most the largest maxBody of the request's
// limits plus one byte, and parsed once; the bytes read go on to the
// upstream before the rest of the body, so that it receives the body byte
// for byte. A body that is not JSON, nests deeper than maxBodyNesting, or
// is longer than maxBody gives no value: the limit's missing: rule applies.

// maxBodyNesting bounds the nesting of a JSON body read for keys.
const maxBodyNesting = 64

// bodyKeys is the body of one request as read for its keys. Its zero value
// has read nothing.
type bodyKeys struct {
	read bool
	// head is what was read of the body, forwarded before the rest.
	head []byte
	// doc is the body's top-level object, nil when the body gives no
	// values.
	doc map[string]any
}

// value returns the value of the body field path (dotted), once load
// has read the body: a string as it is, a number as written, true or
// false; "" for anything else or when the body gives no values.
func (b *bodyKeys) value(path string) string {
	if b.doc == nil {
		return ""
	}
	var v any = b.doc
	for f := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		if v, ok = obj[f]; !ok {
			return ""
		}
	}
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// estimate returns the tokens a request may use, as reserve: estimate
// reads them from its body: its max_tokens (max_completion_tokens,
// max_output_tokens) and a prompt of one token per
// config.EstimateBytesPerToken bytes of the body, at least 1; most when
// the body gives no max_tokens or could not be read, since nothing then
// bounds what the response may use.
func (b *bodyKeys) estimate(most int64) int64 {
	in, out, ok := b.estimateTokens()
	if !ok {
		return most
	}
	return max(min(out, most)+in, 1)
}

// estimateTokens returns the prompt and output tokens of the estimate:
// the prompt one token per config.EstimateBytesPerToken bytes of the
// body, the output its max_tokens; false when the body gives no
// max_tokens or could not be read.
func (b *bodyKeys) estimateTokens() (in, out int64, ok bool) {
	if b.doc == nil {
		return 0, 0, false
	}
	for _, f := range [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		n, has := b.doc[f].(json.Number)
		if !has {
			continue
		}
		out, err := n.Int64()
		if err != nil || out < 0 {
			return 0, 0, false
		}
		in := (int64(len(b.head)) + config.EstimateBytesPerToken - 1) / config.EstimateBytesPerToken
		return in, out, true
	}
	return 0, 0, false
}

// load reads r's body, up to the largest MaxBody of lims and one byte
// more, and parses it if it all came.
func (b *bodyKeys) load(r *http.Request, lims []*ruleset.Limit) {
	b.read = true
	limit := 0
	for _, cl := range lims {
		limit = max(limit, cl.MaxBody)
	}
	if r.Body == nil || r.Body == http.NoBody || limit == 0 {
		return
	}
	if r.ContentLength > int64(limit) {
		return // too long: not read at all
	}
	buf := make([]byte, 0, min(max(r.ContentLength, 512), int64(limit)+1))
	buf, err := readUpTo(r.Body, buf, limit+1)
	b.head = buf
	if err != nil || len(buf) > limit || !shallow(buf) {
		return // broken, too long or too deep: no values
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		return // more than one JSON value
	}
	b.doc = doc
}

// readUpTo appends to buf what r gives until EOF or n bytes in all.
func readUpTo(r io.Reader, buf []byte, n int) ([]byte, error) {
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// shallow reports whether the JSON text b nests at most maxBodyNesting
// deep, counting brackets outside strings: a body of a million '[' costs
// a scan, not a parse.
func shallow(b []byte) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			if depth++; depth > maxBodyNesting {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// forwardBody returns the body the upstream is to receive for r: the
// bytes read for keys, then the rest of r's body.
func (b *bodyKeys) forwardBody(r *http.Request) io.ReadCloser {
	if len(b.head) == 0 {
		return r.Body
	}
	return &headBody{Reader: io.MultiReader(bytes.NewReader(b.head), r.Body), body: r.Body}
}

// headBody is a request body of which a head was read: its Close closes
// the client's body.
type headBody struct {
	io.Reader
	body io.ReadCloser
}

func (h *headBody) Close() error { return h.body.Close() }
