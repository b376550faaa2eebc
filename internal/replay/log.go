package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// replayRecord is one access-log line as replay needs it: what identifies
// the caller and the request, and the instant the live gateway decided at.
type replayRecord struct {
	t      time.Time
	appID  string
	method string
	path   string
	ip     string // "" when the peer had no IP address
	remote string // ip as an http.Request.RemoteAddr
	// invalid reports whether the live gateway refused the request
	// before any limit (400 invalid, 401/403 unauthorized): it is counted
	// and not replayed.
	invalid bool
	file    int   // index of the file in the replay's inputs
	line    int64 // 1-based line number in that file
	// status is the status the live gateway answered a forwarded request
	// with, and cost the cost its upstream reported (upstream_cost), for
	// rules that count only some responses or charge a reported cost
	// (docs/rules.md, "Request cost"); status is 0 for a request the live
	// gateway did not forward, and cost "" when none was logged.
	status int
	cost   string
	// keys are the header and query values the live gateway's keyed
	// limits counted by, as logged: hashes, or the values with
	// --access-log-keys. Either way a replayed request carries them as
	// its values, so that each logged value gets a counter of its own,
	// as it did live. nil when none was logged.
	keys []keyValue
}

// keyValue is a logged value of a keyed limit: a header or query
// parameter and what to send in it.
type keyValue struct {
	query bool   // a query parameter, else a header (or a claim)
	claim bool   // a verified token's claim
	body  bool   // a field of the JSON body; name is its dotted path
	name  string // the header's canonical name, or the parameter's
	val   string
}

// maxKeyFields bounds the key fields read from a line; a limit's by
// rarely names more than two.
const maxKeyFields = 8

// The fields of an access-log line that replay reads, as bits.
const (
	fieldTime = 1 << iota
	fieldMsg
	fieldAppID
	fieldMethod
	fieldPath
	fieldClientIP
	fieldDecision
	fieldStatus
	fieldUpstreamCost
	numFields = iota
)

// fieldNames are the JSON keys of the fields, in bit order.
var fieldNames = [numFields]string{"time", "msg", "app_id", "method", "path", "client_ip", "decision", "status", "upstream_cost"}

// requiredFields are the keys every access line must carry.
const requiredFields = fieldTime | fieldAppID | fieldMethod | fieldPath | fieldClientIP

// rawLine holds the string values of the fields of one line, unescaped.
// They alias the line (fast path) or the fallback's decoded strings.
type rawLine struct {
	vals      [numFields][]byte
	have      uint16 // fields present
	nonString uint16 // fields present with a value that is not a string
	// (its raw JSON is in vals: status and upstream_cost are numbers)
	// keys are the string fields named observe.KeyHashField or
	// observe.KeyValueField and a key part: name (without the prefix) and
	// value.
	keys  [maxKeyFields][2][]byte
	nkeys int
}

// addKey keeps the field key with string value val if it is a key field.
func (f *rawLine) addKey(key, val []byte) {
	part, ok := bytes.CutPrefix(key, []byte(observe.KeyHashField))
	if !ok {
		part, ok = bytes.CutPrefix(key, []byte(observe.KeyValueField))
	}
	if ok && f.nkeys < maxKeyFields {
		f.keys[f.nkeys] = [2][]byte{part, val}
		f.nkeys++
	}
}

// lineKind is what a line turned out to be.
type lineKind uint8

const (
	lineRecord    lineKind = iota // an access record
	lineBlank                     // empty or only white space
	lineOther                     // a JSON object that is not an access record (another log's line)
	lineMalformed                 // not an access record we can replay
)

// maxInterned bounds the strings a lineParser interns, so that a log with
// millions of distinct paths or addresses cannot grow the table without
// bound; past it new strings are allocated per line.
const maxInterned = 1 << 18

// lineParser turns access-log lines into replay records. Most lines are
// what slog's JSON handler writes: a flat object of strings and numbers
// without escapes, which scanFast reads without allocating. Anything else
// goes to encoding/json, which also judges what is not JSON. It is not
// safe for concurrent use.
type lineParser struct {
	raw    rawLine
	intern map[string]string
	ips    map[string]ipForms
}

// ipForms is a client IP and its RemoteAddr form.
type ipForms struct{ ip, remote string }

func newLineParser() *lineParser {
	return &lineParser{intern: make(map[string]string), ips: make(map[string]ipForms)}
}

// parse reads one line (without its newline) into rec. For a malformed
// line the error says why.
func (p *lineParser) parse(line []byte, rec *replayRecord) (lineKind, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return lineBlank, nil
	}
	f := &p.raw
	*f = rawLine{}
	if !scanFast(line, f) {
		*f = rawLine{}
		if err := scanSlow(line, f); err != nil {
			return lineMalformed, err
		}
	}
	if f.have&fieldMsg != 0 && (f.nonString&fieldMsg != 0 || string(f.vals[1]) != "access") {
		return lineOther, nil
	}
	if missing := requiredFields &^ f.have; missing != 0 {
		return lineMalformed, fmt.Errorf("missing %s", fieldList(missing))
	}
	if bad := f.nonString & (requiredFields | fieldDecision); bad != 0 {
		return lineMalformed, fmt.Errorf("%s not a string", fieldList(bad))
	}
	ts := f.vals[0]
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return lineMalformed, fmt.Errorf("time %q is not an RFC 3339 timestamp", ts)
	}
	*rec = replayRecord{t: t}
	if d := string(f.vals[6]); d == observe.DecisionInvalid.String() || d == observe.DecisionUnauthorized.String() {
		rec.invalid = true
		return lineRecord, nil
	}
	method, path, app, ip := f.vals[3], f.vals[4], f.vals[2], f.vals[5]
	if len(method) == 0 {
		return lineMalformed, errors.New("method is empty")
	}
	if len(path) == 0 || path[0] != '/' {
		return lineMalformed, fmt.Errorf("path %q does not start with a slash", path)
	}
	if len(app) > 0 {
		if _, err := ruleset.CheckAppID(string(app)); err != nil {
			return lineMalformed, fmt.Errorf("app_id %q: %v", app, strings.TrimPrefix(err.Error(), "the app ID header "))
		}
	}
	rec.method, rec.path, rec.appID = p.str(method), p.str(path), p.str(app)
	// What the upstream answered a request the live gateway forwarded:
	// its status, and the cost it reported. A request the live gateway
	// answered itself (429, 503) tells nothing of what the upstream
	// would have answered.
	switch d := string(f.vals[6]); d {
	case observe.DecisionAllowed.String(), observe.DecisionShadowLimited.String(), observe.DecisionFailOpen.String(), observe.DecisionUnmatched.String():
		if f.have&fieldStatus != 0 && f.nonString&fieldStatus != 0 {
			if n, err := strconv.Atoi(string(f.vals[7])); err == nil && n >= 100 && n <= 999 {
				rec.status = n
			}
		}
		if f.have&fieldUpstreamCost != 0 && f.nonString&fieldUpstreamCost != 0 {
			if n, err := strconv.ParseInt(string(f.vals[8]), 10, 64); err == nil && n >= 0 {
				rec.cost = p.str(f.vals[8])
			}
		}
	}
	if f.nkeys > 0 {
		rec.keys = make([]keyValue, 0, f.nkeys)
		for _, kv := range f.keys[:f.nkeys] {
			kind, name, _ := bytes.Cut(kv[0], []byte(":"))
			switch string(kind) {
			case "header":
				rec.keys = append(rec.keys, keyValue{name: http.CanonicalHeaderKey(p.str(name)), val: p.str(kv[1])})
			case "query":
				rec.keys = append(rec.keys, keyValue{query: true, name: p.str(name), val: p.str(kv[1])})
			case "claim":
				rec.keys = append(rec.keys, keyValue{claim: true, name: p.str(name), val: p.str(kv[1])})
			case "body":
				rec.keys = append(rec.keys, keyValue{body: true, name: p.str(name), val: p.str(kv[1])})
			}
		}
	}
	if len(ip) > 0 {
		forms, ok := p.ips[string(ip)]
		if !ok {
			a, err := netip.ParseAddr(string(ip))
			if err != nil {
				return lineMalformed, fmt.Errorf("client_ip %q is not an IP address", ip)
			}
			forms = ipForms{ip: string(ip), remote: netip.AddrPortFrom(a, 0).String()}
			if len(p.ips) < maxInterned {
				p.ips[forms.ip] = forms
			}
		}
		rec.ip, rec.remote = forms.ip, forms.remote
	}
	return lineRecord, nil
}

// str returns b as a string, shared with earlier lines when it was seen.
func (p *lineParser) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := p.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.intern) < maxInterned {
		p.intern[s] = s
	}
	return s
}

// fieldList names the fields in bits: `"time", "path"`.
func fieldList(bits uint16) string {
	var names []string
	for i, n := range fieldNames {
		if bits&(1<<i) != 0 {
			names = append(names, `"`+n+`"`)
		}
	}
	return strings.Join(names, ", ")
}

// fieldIndex returns the index of key among fieldNames, or -1.
func fieldIndex(key []byte) int {
	// fieldNames lists the keys slog writes for an access line, in the
	// order it writes them.
	for i, n := range fieldNames {
		if string(key) == n {
			return i
		}
	}
	return -1
}

// scanFast reads a flat JSON object whose strings have no escapes, and
// reports whether it could. It accepts only valid JSON, so whatever it
// declines (escapes, nested values, bad syntax) is left to scanSlow.
func scanFast(b []byte, f *rawLine) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		key, j, ok := fastString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false
		}
		idx := fieldIndex(key)
		if b[i] == '"' {
			val, j, ok := fastString(b, i)
			if !ok {
				return false
			}
			if idx >= 0 {
				f.vals[idx] = val
				f.have |= 1 << idx
				f.nonString &^= 1 << idx
			} else {
				f.addKey(key, val)
			}
			i = j
		} else {
			j, ok := skipScalar(b, i)
			if !ok {
				return false
			}
			if idx >= 0 {
				f.vals[idx] = b[i:j]
				f.have |= 1 << idx
				f.nonString |= 1 << idx
			}
			i = j
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// fastString returns the contents of the JSON string starting at b[i]
// (a quote) and the index after it; ok is false for a string that has an
// escape, a control character or invalid UTF-8, or is not closed.
func fastString(b []byte, i int) (s []byte, next int, ok bool) {
	ascii := true
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if !stringSpecial[c] {
			continue
		}
		switch {
		case c == '"':
			s = b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return nil, 0, false
			}
			return s, j + 1, true
		case c >= 0x80:
			ascii = false
		default: // a backslash or a control character
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// stringSpecial marks the bytes fastString must look at: the quote, the
// backslash, control characters and non-ASCII bytes.
var stringSpecial = func() (t [256]bool) {
	for c := range t {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x80
	}
	return t
}()

// skipScalar skips the number, true, false or null at b[i] and returns the
// index after it; ok is false for anything else, including objects and
// arrays.
func skipScalar(b []byte, i int) (int, bool) {
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(b[i:], []byte(lit)) {
			return i + len(lit), true
		}
	}
	// A JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// scanSlow reads the fields with encoding/json: the lines scanFast
// declines, and the judge of what is not JSON. Keys match exactly, as in
// scanFast (encoding/json's struct decoding would ignore case).
func scanSlow(b []byte, f *rawLine) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return errors.New("not a JSON object")
		}
		return fmt.Errorf("not JSON: %v", err)
	}
	if m == nil {
		return errors.New("not a JSON object")
	}
	for i, name := range fieldNames {
		raw, ok := m[name]
		if !ok {
			continue
		}
		f.have |= 1 << i
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			f.vals[i] = raw
			f.nonString |= 1 << i
			continue
		}
		f.vals[i] = []byte(s)
	}
	for k, raw := range m {
		var s string
		if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
			f.addKey([]byte(k), []byte(s))
		}
	}
	return nil
}

// reorderQueue puts records back in time order. The access log is written
// when a response is complete, so its lines are in order of completion and
// their times (arrivals) are not sorted: a slow request arriving at t is
// logged after fast ones that arrived later. The queue holds records until
// every record that could still precede them has been read, which it takes
// to be window of log time: a record arriving more than window after a
// later one is released late, out of order, and counted.
//
// Records of equal time keep their log order. With a zero window records
// are released in log order.
type reorderQueue struct {
	window int64 // nanoseconds
	q      []replayRecord
	head   int
	maxT   int64                 // the latest time read
	lastT  int64                 // the time of the last record released
	seen   bool                  // a record was read
	out    bool                  // a record was released
	late   func(r *replayRecord) // called for a record released out of order
	emit   func(r *replayRecord)
}

func (rq *reorderQueue) push(r *replayRecord) {
	t := r.t.UnixNano()
	if !rq.seen {
		rq.maxT, rq.seen = t, true
	}
	if rq.out && t < rq.lastT {
		// Every pending record is at or after lastT: r goes first, now.
		rq.late(r)
		rq.emit(r)
		return
	}
	// Insert in time order; usually at the end.
	i := len(rq.q)
	for i > rq.head && rq.q[i-1].t.UnixNano() > t {
		i--
	}
	rq.q = append(rq.q, replayRecord{})
	copy(rq.q[i+1:], rq.q[i:])
	rq.q[i] = *r
	rq.maxT = max(rq.maxT, t)
	rq.release(rq.maxT - rq.window)
}

// release emits the pending records at or before until.
func (rq *reorderQueue) release(until int64) {
	for rq.head < len(rq.q) {
		r := &rq.q[rq.head]
		t := r.t.UnixNano()
		if t > until {
			break
		}
		rq.lastT, rq.out = t, true
		rq.emit(r)
		*r = replayRecord{} // drop its strings
		rq.head++
	}
	if rq.head == len(rq.q) {
		rq.q, rq.head = rq.q[:0], 0
	} else if rq.head > 1024 && rq.head > len(rq.q)/2 {
		n := copy(rq.q, rq.q[rq.head:])
		clear(rq.q[n:])
		rq.q, rq.head = rq.q[:n], 0
	}
}

// flush emits every pending record.
func (rq *reorderQueue) flush() { rq.release(1<<63 - 1) }
