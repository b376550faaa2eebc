package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// MaxKeyValueLen is the longest header or query value a counter is keyed
// on; a longer one gets a 400 invalid_key.
const MaxKeyValueLen = 256

// maxEscapedLen is the longest escaped value kept in a counter key as it
// is; a longer one is replaced by a digest, so that every key stays short
// whatever callers send (the store and the Redis deny cache hold keys).
const maxEscapedLen = 64

// keyKind is how a limit's counter key is built for a request.
type keyKind uint8

const (
	keyFixed keyKind = iota // one counter: by app or global
	keyIP                   // one per client address group: the limit's key, "|", the group
	keyAttrs                // one per value of the limit's header, query and ip parts
)

// kindOf returns how the counters of a limit with by are keyed.
func kindOf(by config.By) keyKind {
	switch {
	case by == config.ByIP:
		return keyIP
	case by.Parts() == nil:
		return keyFixed
	}
	return keyAttrs
}

// attrKey returns the counter key of limit cl (of kind keyAttrs) for r,
// or the code and message of the 400 the request gets: invalid_key for a
// value that is longer than MaxKeyValueLen, sent more than once or badly
// escaped, missing_key for a missing one under missing: deny,
// invalid_query for a query with a raw ';' when a part is a query
// parameter (see semicolonQuery). group returns the client's address
// group; the values of the other parts are those readKeys recorded in o.
//
// The key is the limit's key, "|=", then each part's value, escaped,
// separated by ",": a value with no byte outside [A-Za-z0-9-._~:@/] as it
// is, any other byte as %XX, and an escaped value longer than
// maxEscapedLen as "#" and 32 hex digits of its sha256; "!" for a value
// missing under missing: share. No value can hold "|", ",", "!", "#",
// "=" or a brace, so a key can equal neither another value's key nor one
// of another limit, a client address group's or the overflow key, and
// Redis reads no hash tag in it. A value missing under missing: ip gives
// the key by: ip would.
func attrKey(r *http.Request, cl *compiledLimit, group func() string, o *observe.Outcome) (key, code, msg string) {
	var buf [128]byte
	b := append(buf[:0], cl.key...)
	b = append(b, "|="...)
	for i, p := range cl.parts {
		if i > 0 {
			b = append(b, ',')
		}
		if p.Kind == config.KeyIP {
			b = appendKeyValue(b, group())
			continue
		}
		if p.Kind == config.KeyQuery && strings.IndexByte(r.URL.RawQuery, ';') >= 0 {
			return "", "invalid_query", semicolonQuery(cl, p)
		}
		kv, _ := o.Key(p)
		v, err := kv.Value, kv.Bad
		switch {
		case err != "":
			return "", "invalid_key", "the " + partWhat(p) + " that " + ruleName(cl) + " counts by " + err
		case len(v) > MaxKeyValueLen:
			return "", "invalid_key", "the " + partWhat(p) + " that " + ruleName(cl) + " counts by is longer than 256 bytes"
		case v != "":
			b = appendKeyValue(b, v)
			continue
		}
		switch cl.missing {
		case config.MissingDeny:
			return "", "missing_key", ruleName(cl) + " counts by the " + partWhat(p) + "; send it"
		case config.MissingShare:
			b = append(b, '!')
		default:
			return cl.key + "|" + group(), "", ""
		}
	}
	return string(b), "", ""
}

// readKeys records in o the values of cl's header, query and claim parts
// that o does not hold yet. A request's values are read from it once,
// here: its counter keys (attrKey), the keys it is listed under
// (shownKey, /top) and the access log all take them from o, so that
// they cannot differ.
func readKeys(r *http.Request, cl *compiledLimit, o *observe.Outcome) {
	for _, p := range cl.parts {
		if p.Kind == config.KeyIP {
			continue
		}
		if _, ok := o.Key(p); !ok {
			v, bad := attrValue(r, p, o)
			o.AddKey(observe.KeyValue{Part: p, Value: v, Bad: bad})
		}
	}
}

// shownKey returns the LimitOutcome.Key of limit cl (of kind keyAttrs),
// whose key attrKey built from the values in o, and whether it is the
// client address group of a request missing a value under missing: ip
// (LimitOutcome.Missing). A single value is returned as it is, without
// allocating.
func shownKey(cl *compiledLimit, group func() string, o *observe.Outcome) (string, bool) {
	var vals []string
	for _, p := range cl.parts {
		v := ""
		if p.Kind == config.KeyIP {
			v = group()
		} else {
			kv, _ := o.Key(p)
			v = kv.Value
		}
		if p.Kind != config.KeyIP && v == "" && cl.missing != config.MissingShare && cl.missing != config.MissingDeny {
			return group(), true // counted as by: ip
		}
		if len(cl.parts) == 1 {
			return v, false
		}
		vals = append(vals, v)
	}
	return strings.Join(vals, ", "), false
}

// attrValue returns the value of the header, query parameter or claim p
// names ("" if it is absent or empty), or why it cannot be counted by;
// a claim is looked up in o's verified claims. An address group is not
// an attribute: its value is "".
func attrValue(r *http.Request, p config.KeyPart, o *observe.Outcome) (string, string) {
	switch p.Kind {
	case config.KeyHeader:
		vs := r.Header[p.Name]
		switch len(vs) {
		case 0:
			return "", ""
		case 1:
			return vs[0], ""
		}
		return "", "is sent more than once"
	case config.KeyQuery:
		return queryValue(r.URL.RawQuery, p.Name)
	case config.KeyClaim:
		return o.ClaimValue(p.Name)
	}
	return "", ""
}

// queryValue returns the value of the query parameter name in raw ("" if
// it is absent or empty), or why it cannot be counted by: sent more than
// once, or badly escaped. Unlike url.ParseQuery it builds no map.
func queryValue(raw, name string) (string, string) {
	var v string
	found := false
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, val, _ := strings.Cut(kv, "=")
		if k != name {
			if strings.IndexByte(k, '%') < 0 && strings.IndexByte(k, '+') < 0 {
				continue
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		}
		if found {
			return "", "is sent more than once"
		}
		found = true
		if strings.IndexByte(val, '%') < 0 && strings.IndexByte(val, '+') < 0 {
			v = val
			continue
		}
		u, err := url.QueryUnescape(val)
		if err != nil {
			return "", "is not validly escaped"
		}
		v = u
	}
	return v, ""
}

// semicolonQuery is the message of a request refused because its query
// holds a raw ';' while cl counts by query parameter p. The gateway
// splits the query on '&' only (as the WHATWG URL standard and Go do),
// but some upstreams also split on ';' (Rack before 3, Python's parse_qs
// before 3.9.2): ?user=alice;n=1 would be counted as the user
// "alice;n=1" and served as alice, a new counter for every request.
// Refusing is safer than guessing how the upstream reads it.
func semicolonQuery(cl *compiledLimit, p config.KeyPart) string {
	return ruleName(cl) + " counts by the " + partWhat(p) + ", and the query has a raw ';', which some servers read as a separator between parameters; separate parameters with '&' and send a ';' in a value as %3B"
}

// appendKeyValue appends v to b as attrKey's doc describes.
func appendKeyValue(b []byte, v string) []byte {
	start := len(b)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~:@/", c) >= 0 {
			b = append(b, c)
		} else {
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		}
		if len(b)-start > maxEscapedLen {
			sum := sha256.Sum256([]byte(v))
			b = append(b[:start], '#')
			return hex.AppendEncode(b, sum[:16])
		}
	}
	return b
}

// partWhat names a key part in messages: "header X-User-Id".
func partWhat(p config.KeyPart) string {
	switch p.Kind {
	case config.KeyQuery:
		return "query parameter " + p.Name
	case config.KeyClaim:
		return "token claim " + p.Name
	}
	return "header " + p.Name
}

// ruleName names a limit in messages: "rule /v1/user", or "app app-1's
// total".
func ruleName(cl *compiledLimit) string {
	if cl.api == "" {
		return "app " + cl.app + "'s total"
	}
	return "rule " + cl.api
}
