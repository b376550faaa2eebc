package observe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
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

// KeyHashLen is how many hex digits of a value's HMAC-SHA256 the access
// log and /top write: 64 bits, so that two callers of one rule share a
// hash (and so a replayed counter) with odds of about n²/2⁶⁵ for n
// callers.
const KeyHashLen = 16

// A KeyHasher hashes the header, query and claim values of keyed limits
// for the access log and /top: the first KeyHashLen hex digits of their
// HMAC-SHA256 (RFC 2104) under a secret. A plain hash of a user ID, an
// e-mail address or a short API key is undone by hashing every likely
// value, in well under a second; without the secret there is nothing to
// compare with. The same secret gives the same hash for the same value,
// so that a log can be replayed and /top read next to it; keep it to
// keep hashes stable across restarts (docs/operations.md, "Access log").
//
// A nil *KeyHasher, or one without a secret, writes the first
// KeyHashLen hex digits of the value's plain sha256, as tests do; the
// commands always hash under a secret (OpenKeyHasher). It is safe for concurrent use.
type KeyHasher struct {
	secret []byte
}

// NewKeyHasher returns a KeyHasher under secret, which it copies.
func NewKeyHasher(secret []byte) *KeyHasher {
	return &KeyHasher{secret: bytes.Clone(secret)}
}

// Hash returns what the access log and /top write for a key value v.
func (h *KeyHasher) Hash(v string) string {
	if h == nil || len(h.secret) == 0 {
		sum := sha256.Sum256([]byte(v))
		return hex.EncodeToString(sum[:KeyHashLen/2])
	}
	m := hmac.New(sha256.New, h.secret)
	io.WriteString(m, v)
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:KeyHashLen/2])
}

// KeyHash is Hash of a nil KeyHasher: v's plain, unkeyed hash.
func KeyHash(v string) string { return (*KeyHasher)(nil).Hash(v) }

// keyLogAttrs returns the access-log attributes of the header, query and
// verified claim values that the request's limits counted by, each part
// once: hashed, or as they are when raw. They are the values the request
// path read and keyed the counters on (Outcome.Keys), never read again
// from the request. A part whose value was missing is left out, so that
// a replay counts the request as the missing setting says, as the
// gateway did.
func keyLogAttrs(o *Outcome, raw bool, h *KeyHasher) []slog.Attr {
	var attrs []slog.Attr
	for _, kv := range o.Keys() {
		if kv.Value == "" || kv.Bad != "" {
			continue
		}
		if raw {
			attrs = append(attrs, slog.String(KeyValueField+kv.Part.String(), kv.Value))
		} else {
			attrs = append(attrs, slog.String(KeyHashField+kv.Part.String(), h.Hash(kv.Value)))
		}
	}
	return attrs
}

// SetRawKeys makes the log write the header and query values of keyed
// limits as they are rather than hashed (--access-log-keys). Call it
// before the log is used.
func (a *AccessLog) SetRawKeys(raw bool) { a.rawKeys = raw }

// SetKeyHasher sets what hashes the values of keyed limits; nil (the
// default) hashes with no secret (KeyHash). Call it before the log is
// used.
func (a *AccessLog) SetKeyHasher(h *KeyHasher) { a.hasher = h }

// Value returns v as the log writes a value a caller sent: hashed
// (SetKeyHasher), or as it is with SetRawKeys. `gateway rls` writes its
// descriptor values so.
func (a *AccessLog) Value(v string) string {
	if a.rawKeys {
		return v
	}
	return a.hasher.Hash(v)
}
