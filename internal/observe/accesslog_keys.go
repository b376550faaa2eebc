package observe

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
)

// Access-log fields of keyed limits: the prefix, then the key part as
// the rule file writes it ("key_hash.header:X-User-Id").
const (
	// KeyHashField prefixes the hash of a value: what the access log
	// writes unless --access-log-keys.
	KeyHashField = "key_hash."
	// KeyValueField prefixes a value itself (--access-log-keys).
	KeyValueField = "key."
)

// KeyHashLen is how many hex digits of a value's sha256 the access log
// writes: 64 bits, so that two callers of one rule share a hash (and so a
// replayed counter) with odds of about n²/2⁶⁵ for n callers.
const KeyHashLen = 16

// KeyHash returns what the access log writes for a key value v: the
// first KeyHashLen hex digits of its sha256.
func KeyHash(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:KeyHashLen/2])
}

// keyLogAttrs returns the access-log attributes of the header, query and
// verified claim values that the request's limits counted by, each part
// once: hashed, or as they are when raw. They are the values the request
// path read and keyed the counters on (Outcome.Keys), never read again
// from the request. A part whose value was missing is left out, so that
// a replay counts the request as the missing setting says, as the
// gateway did.
func keyLogAttrs(o *Outcome, raw bool) []slog.Attr {
	var attrs []slog.Attr
	for _, kv := range o.Keys() {
		if kv.Value == "" || kv.Bad != "" {
			continue
		}
		if raw {
			attrs = append(attrs, slog.String(KeyValueField+kv.Part.String(), kv.Value))
		} else {
			attrs = append(attrs, slog.String(KeyHashField+kv.Part.String(), KeyHash(kv.Value)))
		}
	}
	return attrs
}

// SetRawKeys makes the log write the header and query values of keyed
// limits as they are rather than hashed (--access-log-keys). Call it
// before the log is used.
func (a *AccessLog) SetRawKeys(raw bool) { a.rawKeys = raw }
