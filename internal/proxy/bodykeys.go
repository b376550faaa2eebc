package proxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file reads the fields of a request's JSON body that limits count by
// (by: body:model; docs/plans-and-tokens.md, "Keys from the request body").
// The body is read once, at most the largest maxBody of the request's
// limits plus one byte, and parsed once; the bytes read go on to the
// upstream before the rest of the body, so that it receives the body byte
// for byte. A body that is not JSON, nests deeper than maxBodyNesting, or
// is longer than maxBody gives no value: the limit's missing: rule applies.
// A body that does not arrive within its timeout gets 408 (late); one
// whose read would pass the memory the gateway gives such bodies
// (--max-body-memory) gets 503 (full).

// maxBodyNesting bounds the nesting of a JSON body read for keys.
const maxBodyNesting = 64

// DefaultBodyTimeout is HandlerConfig.BodyTimeout's default.
const DefaultBodyTimeout = 10 * time.Second

// bodyStart is the most of a body read for keys that is allocated before
// it arrives: a client that declares a large Content-Length and sends
// nothing pins no more.
const bodyStart = 16 << 10

// DefaultBodyMemory is HandlerConfig.BodyMemory's default: 4,096 bodies
// of the default maxBody, at once; MinBodyMemory the least the server
// takes: two such bodies of unknown length (each grows its buffer to
// maxBody + 1 bytes), one for the reads of shadow limits alone.
const (
	DefaultBodyMemory = 256 << 20
	MinBodyMemory     = 256 << 10
)

// bodyBudget is the memory the gateway gives the bodies it reads for keys
// (HandlerConfig.BodyMemory): each read takes what its buffer grows to
// as it grows, and gives it back once what it read has gone on to the
// upstream, or its request has ended, so that a body that stops coming
// holds about what it sent. The reads of shadow limits alone, which wait
// for a body without a deadline, hold at most half of it (shadow). A nil
// bodyBudget has no cap. It is safe for concurrent use.
type bodyBudget struct {
	max          int64
	used, shadow atomic.Int64
}

// newBodyBudget returns the budget of max bytes: DefaultBodyMemory for 0,
// none (nil) when negative.
func newBodyBudget(max int64) *bodyBudget {
	if max < 0 {
		return nil
	}
	return &bodyBudget{max: cmp.Or(max, DefaultBodyMemory)}
}

// warnBodyMemory logs a warning when the memory for bodies read for keys
// (--max-body-memory) cannot hold two bodies of the largest maxBody of rs
// (a body of unknown length grows its buffer to maxBody + 1 bytes): such
// a body then gets 503 body_memory_full whenever another is held, or
// always, past the whole cap, however idle the gateway is; a read for
// shadow limits alone goes without its value past half of it.
func (h *Handler) warnBodyMemory(rs *ruleset.Set) {
	b := h.bodyMemory
	if b == nil || rs == nil {
		return
	}
	n, of := rs.LargestMaxBody()
	if of == nil || 2*(int64(n)+1) <= b.max {
		return
	}
	h.log.Warn("--max-body-memory holds fewer than two request bodies of the largest maxBody of the rules: such a body gets 503 body_memory_full whenever another is held (always, past the whole of it), and a shadow limit's read goes without its value past half of it; set --max-body-memory well above the largest maxBody",
		"max_body_memory", b.max, "max_body", n, "app", of.App, "api", cmp.Or(of.API, "(total)"))
}

// takeUpTo takes n bytes of c, at most max in all, and reports whether there
// were as many left.
func takeUpTo(c *atomic.Int64, n, max int64) bool {
	for {
		u := c.Load()
		if u+n > max {
			return false
		}
		if c.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// bodyHold is what one request's body holds of a budget: n bytes, of the
// shadow reads' share when shadow. It is its own object, not the
// request's scratch, since the upstream's transport may send the body on
// after the handler has returned.
type bodyHold struct {
	budget *bodyBudget
	shadow bool
	n      atomic.Int64
}

// take takes n more bytes, and reports whether there were as many left.
func (h *bodyHold) take(n int64) bool {
	b := h.budget
	if b == nil {
		return true
	}
	if h.shadow && !takeUpTo(&b.shadow, n, b.max/2) {
		return false
	}
	if !takeUpTo(&b.used, n, b.max) {
		if h.shadow {
			b.shadow.Add(-n)
		}
		return false
	}
	h.n.Add(n)
	return true
}

// release gives back what h holds; at most once, whoever calls it first.
func (h *bodyHold) release() {
	if h == nil || h.budget == nil {
		return
	}
	if n := h.n.Swap(0); n != 0 {
		h.budget.used.Add(-n)
		if h.shadow {
			h.budget.shadow.Add(-n)
		}
	}
}

// errBodyMemory stops the read of a body whose buffer could not grow
// within its budget.
var errBodyMemory = errors.New("the memory for bodies read for keys is in use")

// bodyKeys is the body of one request as read for its keys. Its zero value
// has read nothing.
type bodyKeys struct {
	read bool
	// late is set when the body read for keys did not arrive within
	// timeout: the request is answered 408 (lateBody).
	late bool
	// full is set when the buffer for the body could not grow within
	// budget, which held the bytes it took: the request is answered 503
	// (bodyRefused).
	full   bool
	budget *bodyBudget
	hold   *bodyHold
	// w sets the read deadline of the request's connection (or stream);
	// timeout bounds the read. Set for each request before any load.
	w       http.ResponseWriter
	timeout time.Duration
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
	enforced := slices.ContainsFunc(lims, func(cl *ruleset.Limit) bool { return !cl.Shadow })
	if b.w != nil && b.timeout > 0 && enforced {
		// Bounded as the headers are (--read-header-timeout); the rest
		// of the body streams to the upstream without one. A shadow
		// limit never refuses: alone, it waits for the body as it comes.
		rc := http.NewResponseController(b.w)
		if rc.SetReadDeadline(time.Now().Add(b.timeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	// Up to what is to be read (a body is never longer than its
	// Content-Length: net/http ends it there), allocated as it arrives.
	most := int64(limit) + 1
	if r.ContentLength >= 0 {
		most = min(max(r.ContentLength, 512), most)
	}
	// A shadow limit never refuses: alone, it goes without the values
	// of a body the memory cannot hold (its missing: rule applies).
	start := min(most, bodyStart)
	b.hold = &bodyHold{budget: b.budget, shadow: !enforced}
	if !b.hold.take(start) {
		b.full = enforced
		return
	}
	buf, err := readUpTo(r.Body, make([]byte, 0, start), int(most), b.hold.take)
	b.head = buf
	b.late = errors.Is(err, os.ErrDeadlineExceeded)
	b.full = enforced && errors.Is(err, errBodyMemory)
	// A byte-order mark at the start is not the document's: RFC 8259,
	// section 8.1, lets a parser ignore one.
	text := bytes.TrimPrefix(buf, []byte(usage.ByteOrderMark))
	if err != nil || len(buf) > limit || !shallow(text) {
		return // broken, too long or too deep: no values
	}
	dec := json.NewDecoder(bytes.NewReader(text))
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

// free gives back the bytes the body took, once its request has ended,
// if they did not go back when the upstream took them (headBody).
func (b *bodyKeys) free() { b.hold.release() }

// readUpTo appends to buf what r gives until EOF or n bytes in all,
// doubling buf as it fills, to at most n: a body that stops coming has
// taken about what it sent. Before buf grows, grow must take the bytes
// it grows by, else the read stops with errBodyMemory.
func readUpTo(r io.Reader, buf []byte, n int, grow func(int64) bool) ([]byte, error) {
	for len(buf) < n {
		if len(buf) == cap(buf) {
			c := min(2*cap(buf)+1, n)
			if !grow(int64(c - cap(buf))) {
				return buf, errBodyMemory
			}
			buf = append(make([]byte, 0, c), buf...)
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
	head := b.head
	b.head = nil // the upstream's reads hold it, until they have taken it
	return &headBody{head: head, body: r.Body, hold: b.hold}
}

// headBody is a request body of which a head was read: the head, then the
// rest of the client's body. Once the upstream has taken the head, its
// memory goes back to the budget (hold), and to the garbage collector:
// a client that then sends the rest slowly, or an upstream that reads
// it slowly, holds none of it. Its Close closes the client's body.
type headBody struct {
	head []byte
	body io.ReadCloser
	hold *bodyHold
}

func (h *headBody) Read(p []byte) (int, error) {
	if len(h.head) == 0 {
		return h.body.Read(p)
	}
	n := copy(p, h.head)
	if h.head = h.head[n:]; len(h.head) == 0 {
		h.head = nil
		h.hold.release()
	}
	return n, nil
}

func (h *headBody) Close() error { return h.body.Close() }

// bodyRefused answers a request whose body, read for its keys, did not
// arrive within its timeout (bodyKeys.late) with 408, or could not be
// held within the memory for such bodies (bodyKeys.full) with 503, and
// reports true; it is refused before anything is counted.
func bodyRefused(w http.ResponseWriter, sc *scratch) bool {
	if sc.body.full {
		sc.o.Decision = observe.DecisionOverloaded
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "body_memory_full",
			"the gateway holds as many bytes of request bodies as --max-body-memory allows, and a limit of this API reads this one before it decides: try again shortly")
		return true
	}
	if !sc.body.late {
		return false
	}
	sc.o.Decision = observe.DecisionInvalid
	WriteError(w, http.StatusRequestTimeout, "request_timeout",
		"the request body was not received in time (--read-header-timeout, "+sc.body.timeout.String()+"): a limit of this API reads it before it decides")
	return true
}
