package ruleset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/query"
)

// DefaultIPv4Prefix and DefaultIPv6Prefix are the prefix lengths that
// group client addresses into one counter when no --ipv4-prefix or
// --ipv6-prefix is given (see AddrGroup).
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// MaxKeyValueLen is the longest header or query value a counter is keyed
// on; a longer one gets a 400 invalid_key.
const MaxKeyValueLen = 256

// maxEscapedLen is the longest escaped value kept in a counter key as it
// is; a longer one is replaced by a digest, so that every key stays short
// whatever callers send (the store and the Redis deny cache hold keys).
const maxEscapedLen = 64

// KeyKind is how a limit's counter key is built for a request.
type KeyKind uint8

const (
	KeyFixed KeyKind = iota // one counter: by app or global
	KeyIP                   // one per client address group: the limit's key, "|", the group
	KeyAttrs                // one per value of the limit's header, query and ip parts
)

// kindOf returns how the counters of a limit with by are keyed.
func kindOf(by config.By) KeyKind {
	switch {
	case by == config.ByIP:
		return KeyIP
	case by.Parts() == nil:
		return KeyFixed
	}
	return KeyAttrs
}

// AttrKey returns the counter key of limit cl (of kind KeyAttrs) for a
// request with these headers and raw query, or the code and message of
// the 400 the request gets: invalid_key for a value that is longer than
// MaxKeyValueLen, sent more than once or badly escaped, missing_key for a
// missing one under missing: deny, invalid_query for a query with a raw
// ';' when a part is a query parameter (see semicolonQuery). group
// returns the client's address group, claim the value of a claim of the
// caller's verified token (see AttrValue).
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
func (cl *Limit) AttrKey(rawQuery string, group func() string, vals Values) (key, code, msg string) {
	var buf [128]byte
	b := append(buf[:0], cl.Key...)
	b = append(b, "|="...)
	for i, p := range cl.Parts {
		if i > 0 {
			b = append(b, ',')
		}
		if p.Kind == config.KeyIP {
			b = appendKeyValue(b, group())
			continue
		}
		if p.Kind == config.KeyQuery && strings.IndexByte(rawQuery, ';') >= 0 {
			return "", "invalid_query", semicolonQuery(cl, p)
		}
		v, err := vals.AttrValue(p)
		switch {
		case err != "":
			return "", "invalid_key", "the " + partWhat(p) + " that " + ruleName(cl) + " counts by " + err
		case len(v) > MaxKeyValueLen:
			return "", "invalid_key", "the " + partWhat(p) + " that " + ruleName(cl) + " counts by is longer than 256 bytes"
		case v != "":
			b = appendKeyValue(b, v)
			continue
		}
		switch cl.Missing {
		case config.MissingDeny:
			return "", "missing_key", ruleName(cl) + " counts by the " + partWhat(p) + "; send it"
		case config.MissingShare:
			b = append(b, '!')
		default:
			return cl.Key + "|" + group(), "", ""
		}
	}
	return string(b), "", ""
}

// Values gives the values of one request's key parts: the value of the
// header, query parameter or claim p names ("" if it is absent or empty),
// or why it cannot be counted by. The request path reads each value once
// and keeps it for the observers too (package observe's Outcome);
// Explain reads them from the request it describes.
type Values interface {
	AttrValue(p config.KeyPart) (value, bad string)
}

// AttrValue returns the value of the header, query parameter or claim p
// names ("" if it is absent or empty) in a request with these headers
// and raw query, or why it cannot be counted by. claim looks up the
// caller's verified claims: the value of a claim, or why it cannot be
// counted by. An address group is not an attribute: its value is "".
func AttrValue(header http.Header, rawQuery string, p config.KeyPart, claim func(string) (string, string)) (string, string) {
	switch p.Kind {
	case config.KeyHeader:
		vs := header[p.Name]
		switch len(vs) {
		case 0:
			return "", ""
		case 1:
			return vs[0], ""
		}
		return "", "is sent more than once"
	case config.KeyQuery:
		return queryValue(rawQuery, p.Name)
	case config.KeyClaim:
		return claim(p.Name)
	}
	// A body field is read by the request path itself (package proxy),
	// which holds the body; an address group is not an attribute.
	return "", ""
}

// queryValue returns the value of the query parameter name in raw ("" if
// it is absent or empty), or why it cannot be counted by: sent more than
// once, or badly escaped.
func queryValue(raw, name string) (string, string) {
	v, err := query.Value(raw, name)
	switch {
	case errors.Is(err, query.ErrRepeated):
		return "", "is sent more than once"
	case err != nil:
		return "", "is not validly escaped"
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
func semicolonQuery(cl *Limit, p config.KeyPart) string {
	return ruleName(cl) + " counts by the " + partWhat(p) + ", and the query has a raw ';', which some servers read as a separator between parameters; separate parameters with '&' and send a ';' in a value as %3B"
}

// appendKeyValue appends v to b as AttrKey's doc describes.
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
	case config.KeyBody:
		return "body field " + p.Name
	}
	return "header " + p.Name
}

// ruleName names a limit in messages: "rule /v1/user", or "app app-1's
// total".
func ruleName(cl *Limit) string {
	if cl.API == "" {
		return "app " + cl.App + "'s total"
	}
	return "rule " + cl.API
}

// AddrGroup returns the network of ip's first v4Bits or v6Bits bits, as a
// counter key part.
func AddrGroup(ip netip.Addr, v4Bits, v6Bits int) string {
	bits := v4Bits
	if ip.Is6() {
		bits = v6Bits
	}
	if !ip.IsValid() || bits >= ip.BitLen() {
		return ip.String()
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return ip.String()
	}
	return p.String()
}
