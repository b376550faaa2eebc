// Package usage reads what a response reports it used — the tokens of an
// LLM API — from its body as the body streams by: a JSON document, or a
// server-sent-event stream (text/event-stream) whose events carry usage
// (OpenAI's final chunk with "usage", Anthropic's message_start and
// message_delta). See docs/plans-and-tokens.md.
//
// A Meter only looks at bytes the caller has already passed on: it never
// holds the response back, and it inspects at most a bounded number of
// bytes of a JSON body, or of one event, so that a huge response costs a
// bounded amount of memory. It knows nothing about HTTP or limits.
package usage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DefaultInspect is the default cap on the bytes of a JSON body, or of
// the data of one event of a stream, that a Meter parses.
const DefaultInspect = 1 << 20

// A Path is a field path in a JSON document: "usage.total_tokens" is the
// field total_tokens of the object in the field usage of the top-level
// object.
type Path []string

// ParsePath parses a dotted field path.
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, errors.New("the field path is empty")
	}
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("the field path %q has an empty field; write fields separated by single dots, like usage.total_tokens", s)
		}
	}
	return parts, nil
}

// String returns the path as written.
func (p Path) String() string { return strings.Join(p, ".") }

// Meter reads the usage a response reports at Paths: their sum, each the
// last value seen. In a stream each path keeps the last value any event
// gave it (Anthropic's message_delta usage is cumulative), and the
// usage so far is known before the stream ends. The zero value is not
// usable; a Meter is used by one goroutine.
type Meter struct {
	paths   []Path
	inspect int
	// needles are what a document holding one of the paths must
	// contain (needle), to skip events without parsing them.
	needles [][]byte
	sse     bool
	// lf reports that the stream's lines end with LF (lineEnd).
	lf   bool
	last []int64
	seen []bool
	// buf holds the JSON body so far, or the current line of the
	// stream; data the current event's data.
	buf, data []byte
	// direct is the data of the current event while it lies in the
	// bytes being written (hasDirect); lines counts its data lines.
	direct    []byte
	hasDirect bool
	lines     int
	// over reports that the JSON body, or the current event, passed
	// inspect and is not parsed.
	over bool
	// done reports that a JSON body was parsed.
	done bool
	// skipped reports that an event of a stream was not parsed for
	// being over inspect.
	skipped bool
	// priced reports that the Meter also reads the model (priced.go),
	// model the first one read.
	priced bool
	model  string
	// bom counts the bytes of a leading byte-order mark (U+FEFF, which
	// the event-stream format says to ignore, and JSON parsers refuse)
	// matched so far; past is set once the body is past where one may be.
	bom  uint8
	past bool
}

// ByteOrderMark is U+FEFF in UTF-8, which a body may start with and a
// reader skips (the event-stream format; RFC 8259 lets a JSON parser).
const ByteOrderMark = "\xef\xbb\xbf"

// NewMeter returns a Meter of the paths for a response with the given
// Content-Type, parsing at most inspect bytes of a JSON body or of one
// event (DefaultInspect when 0 or less).
func NewMeter(paths []Path, contentType string, inspect int) *Meter {
	if inspect <= 0 {
		inspect = DefaultInspect
	}
	m := &Meter{paths: paths, inspect: inspect, last: make([]int64, len(paths)), seen: make([]bool, len(paths))}
	for _, p := range paths {
		n := needle(p[len(p)-1])
		if !slices.ContainsFunc(m.needles, func(b []byte) bool { return string(b) == n }) {
			m.needles = append(m.needles, []byte(n))
		}
	}
	mt, _, _ := strings.Cut(contentType, ";")
	m.sse = strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
	return m
}

// needle returns what a document holding the field key must contain:
// the key and its closing quote, from its first '_' when it has one.
// bytes.Index looks for the needle's first byte and compares from there,
// so a needle that starts with a byte rare in JSON ('_' rather than '"')
// makes the search several times faster; and usage fields
// (total_tokens, input_tokens, output_tokens) share one needle.
func needle(key string) string {
	if i := strings.IndexByte(key, '_'); i > 0 {
		key = key[i:]
	}
	return key + `"`
}

// Write looks at the next bytes of the body. It never fails.
func (m *Meter) Write(b []byte) (int, error) {
	n := len(b)
	if !m.past {
		// A byte-order mark at the start, maybe split across writes, is
		// not the body's: skipped. Bytes that only began like one are.
		for len(b) > 0 && int(m.bom) < len(ByteOrderMark) && b[0] == ByteOrderMark[m.bom] {
			m.bom++
			b = b[1:]
		}
		if int(m.bom) == len(ByteOrderMark) {
			m.past = true
		} else if len(b) > 0 {
			m.past = true
			if m.bom > 0 {
				m.write([]byte(ByteOrderMark[:m.bom]))
			}
		}
	}
	if len(b) > 0 {
		m.write(b)
	}
	return n, nil
}

// write looks at the next bytes of the body, past a byte-order mark.
func (m *Meter) write(b []byte) {
	if m.sse {
		m.stream(b)
		return
	}
	if !m.over {
		if len(m.buf)+len(b) > m.inspect {
			m.over, m.buf = true, nil
		} else {
			m.buf = append(m.buf, b...)
		}
	}
}

// stream splits b into lines (LF, CRLF or CR, as the event-stream format
// allows) and handles each; a line split across writes is gathered in buf.
func (m *Meter) stream(b []byte) {
	// Whole events that cannot hold a path are skipped in one search:
	// b starts where no event is under way and ends with the empty
	// line that ends an event (the stream's lines end with LF).
	if m.lf && len(m.buf) == 0 && m.lines == 0 && !m.over && bytes.HasSuffix(b, []byte("\n\n")) && !m.mayHold(b) {
		return
	}
	// An event's data held in b must be copied before b goes back to
	// the caller.
	defer m.keepDirect()
	for len(b) > 0 {
		i := m.lineEnd(b)
		if i < 0 {
			m.appendLine(b)
			return
		}
		if len(m.buf) > 0 || m.over {
			m.appendLine(b[:i])
			m.line(m.buf, false)
			m.buf = m.buf[:0]
		} else {
			m.line(b[:i], true)
		}
		// A CR at the end of b followed by LF in the next write makes
		// an empty line too many; an empty line dispatches only an
		// event with data, so that is harmless.
		b = b[i+1:]
	}
}

// lineEnd returns the index of the end of the first line in b, or -1.
// Once a line has ended with LF (or CRLF), the stream is taken to end
// every line so and only LF is looked for, the CR before it dropped:
// one scan of each byte rather than two. Until then, and in a stream
// whose lines end with CR alone, both are looked for.
func (m *Meter) lineEnd(b []byte) int {
	if m.lf {
		return bytes.IndexByte(b, '\n')
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		i = len(b)
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 && (j+1 >= len(b) || b[j+1] != '\n') {
		return j
	}
	if i == len(b) {
		return -1
	}
	m.lf = true
	return i
}

func (m *Meter) appendLine(b []byte) {
	if len(m.buf)+len(b) > m.inspect+len("data: ") {
		m.over = true
		return
	}
	m.buf = append(m.buf, b...)
}

// keepDirect copies the data held in the caller's bytes into data.
func (m *Meter) keepDirect() {
	if m.hasDirect {
		m.data = append(m.data[:0], m.direct...)
		m.direct, m.hasDirect = nil, false
	}
}

// line handles one complete line of the stream. inB reports whether l
// lies in the bytes being written, which stay valid until the write
// returns: the data of an event that comes whole in one write is parsed
// from there, without a copy.
func (m *Meter) line(l []byte, inB bool) {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1] // CRLF
	}
	if len(l) == 0 {
		m.dispatch()
		return
	}
	if v, ok := bytes.CutPrefix(l, []byte("data:")); ok && !m.over {
		v = bytes.TrimPrefix(v, []byte(" "))
		if len(m.data)+len(m.direct)+len(v) > m.inspect {
			m.over = true
			return
		}
		if m.lines == 0 && inB {
			m.direct, m.hasDirect, m.lines = v, true, 1
			return
		}
		m.keepDirect()
		if m.lines > 0 {
			m.data = append(m.data, '\n')
		}
		m.data = append(m.data, v...)
		m.lines++
	}
}

// dispatch parses the data of the event that an empty line ended.
func (m *Meter) dispatch() {
	data, over := m.data, m.over
	if m.hasDirect {
		data = m.direct
	}
	m.data, m.over, m.direct, m.hasDirect, m.lines = m.data[:0], false, nil, false, 0
	m.skipped = m.skipped || over
	if over || len(data) == 0 {
		return
	}
	m.parse(data)
}

// mayHold reports whether b holds one of the needles.
func (m *Meter) mayHold(b []byte) bool {
	for _, n := range m.needles {
		if bytes.Contains(b, n) {
			return true
		}
	}
	return false
}

// parse reads the paths from the JSON document doc, if it may hold one.
func (m *Meter) parse(doc []byte) {
	if !m.mayHold(doc) {
		return
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return
	}
	for i, p := range m.paths {
		if n, ok := lookup(v, p); ok {
			m.last[i], m.seen[i] = n, true
		}
	}
	m.readModel(v)
}

// MaxUsage is the usage a Meter reports for a number too large to
// count: any cap a limit sets is below it, so such a response is charged
// its limit's max. Sums of usages stop there too.
const MaxUsage = math.MaxInt64 / 4

// lookup returns the number ≥ 0 at path p of v: a fraction rounded up,
// and a number above MaxUsage (1e30, or 20 digits) as MaxUsage, so that
// an absurd report is charged the most, never the least.
func lookup(v any, p Path) (int64, bool) {
	for _, k := range p {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = obj[k]; !ok {
			return 0, false
		}
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(num), 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return min(n, MaxUsage), true
	}
	// Not an int64: a fraction, an exponent, or too many digits. A
	// number out of float64's range parses as ±Inf with ErrRange.
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	if f >= MaxUsage {
		return MaxUsage, true
	}
	return int64(math.Ceil(f)), true
}

// Close ends the body: a JSON body is parsed, and the last event of a
// stream that did not end with an empty line is dispatched.
func (m *Meter) Close() {
	if !m.past && m.bom > 0 && int(m.bom) < len(ByteOrderMark) {
		// A body of only the start of a mark: its bytes are the body.
		m.past = true
		m.write([]byte(ByteOrderMark[:m.bom]))
	}
	if m.sse {
		if len(m.buf) > 0 {
			m.line(m.buf, false)
			m.buf = m.buf[:0]
		}
		m.dispatch()
		return
	}
	if !m.done && !m.over {
		m.done = true
		m.parse(m.buf)
	}
	m.buf = nil
}

// Skipped reports whether some of the body was not parsed for being over
// inspect: a JSON body longer than it, or an event of a stream. Its usage
// is then unknown rather than absent.
func (m *Meter) Skipped() bool { return m.skipped || !m.sse && m.over }

// Used returns the usage reported so far, the sum of the paths' last
// values, and whether any path was seen.
func (m *Meter) Used() (int64, bool) {
	var sum int64
	any := false
	for i := range m.paths {
		if m.seen[i] {
			sum = min(sum+m.last[i], MaxUsage)
			any = true
		}
	}
	return sum, any
}
