package redistest

import (
	"context"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewCounterType is the Redis type SetFields gives a counter key that does
// not exist yet: "hash" (one hash field per field) or "string" (the fields
// as a MessagePack map of names to values, as the store keeps them).
const NewCounterType = "string"

// Fields returns the fields of the counter at key, whichever type it is: a
// hash's fields, or a string's MessagePack map of names to values (a
// number as its decimal digits). A key that does not exist has no fields.
// Any other type, or a string that is not such a map, is an error.
//
// It reads the key's type and then its fields, two commands that are not
// atomic: a key whose type changes in between may read as an error.
func Fields(ctx context.Context, c redis.Cmdable, key string) (map[string]string, error) {
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: TYPE %s: %w", key, err)
	}
	switch typ {
	case "none":
		return map[string]string{}, nil
	case "hash":
		m, err := c.HGetAll(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("redistest: HGETALL %s: %w", key, err)
		}
		return m, nil
	case "string":
		s, err := c.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return map[string]string{}, nil // gone since TYPE
		}
		if err != nil {
			return nil, fmt.Errorf("redistest: GET %s: %w", key, err)
		}
		names, values, err := parsePairs(s)
		if err != nil {
			return nil, fmt.Errorf("redistest: key %s: %w", key, err)
		}
		m := make(map[string]string, len(names))
		for i, n := range names {
			m[n] = values[i]
		}
		return m, nil
	default:
		return nil, fmt.Errorf("redistest: key %s is a %s, not a counter (a hash or a string)", key, typ)
	}
}

// Field returns the field name of the counter at key, as HGET does: the
// error is redis.Nil when the key or the field does not exist.
func Field(ctx context.Context, c redis.Cmdable, key, name string) (string, error) {
	m, err := Fields(ctx, c, key)
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", redis.Nil
	}
	return v, nil
}

// FieldInt returns the field name of the counter at key as a number, as
// HGET's Int does: the error is redis.Nil when the key or the field does
// not exist.
func FieldInt(ctx context.Context, c redis.Cmdable, key, name string) (int, error) {
	v, err := Field(ctx, c, key, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("redistest: field %s of key %s: %w", name, key, err)
	}
	return n, nil
}

// SetFields sets the fields of the counter at key from pairs (name, value,
// name, value, …), keeping the others, the key's type and its time to
// live: a hash gets HSET, a string is read, merged and written back with
// SET … KEEPTTL. A key that does not exist is made as NewCounterType says,
// without a time to live. Names and values must be non-empty and hold no
// space, as the store's never do.
//
// A string is read and written in two commands, not atomically: a test
// must not set fields of a key the store is writing.
func SetFields(ctx context.Context, c redis.Cmdable, key string, pairs ...string) error {
	return setFields(ctx, c, key, NewCounterType, pairs)
}

// setFields is SetFields with the type of a new key as newType.
func setFields(ctx context.Context, c redis.Cmdable, key, newType string, pairs []string) error {
	if len(pairs)%2 != 0 {
		return fmt.Errorf("redistest: setting fields of %s: %d names and values, want pairs", key, len(pairs))
	}
	for _, s := range pairs {
		if s == "" || strings.Contains(s, " ") {
			return fmt.Errorf("redistest: setting fields of %s: %q: names and values must be non-empty without spaces", key, s)
		}
	}
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("redistest: TYPE %s: %w", key, err)
	}
	if typ == "none" {
		typ = newType
	}
	switch typ {
	case "hash":
		args := make([]any, len(pairs))
		for i, s := range pairs {
			args[i] = s
		}
		if err := c.HSet(ctx, key, args...).Err(); err != nil {
			return fmt.Errorf("redistest: HSET %s: %w", key, err)
		}
		return nil
	case "string":
		s, err := c.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("redistest: GET %s: %w", key, err)
		}
		names, values, err := parsePairs(s)
		if err != nil {
			return fmt.Errorf("redistest: key %s: %w", key, err)
		}
	next:
		for i := 0; i < len(pairs); i += 2 {
			for j, n := range names {
				if n == pairs[i] {
					values[j] = pairs[i+1]
					continue next
				}
			}
			names, values = append(names, pairs[i]), append(values, pairs[i+1])
		}
		if err := c.Set(ctx, key, packPairs(names, values), redis.KeepTTL).Err(); err != nil {
			return fmt.Errorf("redistest: SET %s: %w", key, err)
		}
		return nil
	default:
		return fmt.Errorf("redistest: key %s is a %s, not a counter (a hash or a string)", key, typ)
	}
}

// parsePairs returns the field names and values of a string counter: a
// MessagePack map (https://github.com/msgpack/msgpack/blob/master/spec.md)
// whose keys and values are strings or integers, the values as decimal
// strings. The empty string holds no fields.
func parsePairs(s string) (names, values []string, err error) {
	if s == "" {
		return nil, nil, nil
	}
	b := []byte(s)
	n, b, err := mapLen(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%q is not a MessagePack map: %w", s, err)
	}
	seen := make(map[string]bool, n)
	for range n {
		var k, v string
		if k, b, err = scalar(b); err == nil {
			v, b, err = scalar(b)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%q: %w", s, err)
		}
		if seen[k] {
			return nil, nil, fmt.Errorf("field %s twice in %q", k, s)
		}
		seen[k] = true
		names, values = append(names, k), append(values, v)
	}
	if len(b) > 0 {
		return nil, nil, fmt.Errorf("%q: %d bytes after the map", s, len(b))
	}
	return names, values, nil
}

// mapLen reads the head of a MessagePack map: its number of pairs.
func mapLen(b []byte) (int, []byte, error) {
	switch {
	case len(b) == 0:
		return 0, nil, errors.New("empty")
	case b[0]&0xf0 == 0x80:
		return int(b[0] & 0x0f), b[1:], nil
	case b[0] == 0xde && len(b) >= 3:
		return int(binenc.BigEndian.Uint16(b[1:])), b[3:], nil
	case b[0] == 0xdf && len(b) >= 5:
		return int(binenc.BigEndian.Uint32(b[1:])), b[5:], nil
	}
	return 0, nil, fmt.Errorf("type 0x%02x, want a map", b[0])
}

// scalar reads a MessagePack string, integer or integral float as a
// string.
func scalar(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errors.New("the map ends early")
	}
	c, b := b[0], b[1:]
	size := map[byte]int{0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8, 0xca: 4, 0xcb: 8, 0xd9: 1, 0xda: 2, 0xdb: 4}[c]
	if len(b) < size {
		return "", nil, errors.New("the map ends early")
	}
	x, rest := uint64(0), b[size:]
	for _, d := range b[:size] {
		x = x<<8 | uint64(d)
	}
	str := func(n int) (string, []byte, error) {
		if len(rest) < n {
			return "", nil, errors.New("the map ends early")
		}
		return string(rest[:n]), rest[n:], nil
	}
	switch {
	case c <= 0x7f:
		return strconv.Itoa(int(c)), b, nil
	case c >= 0xe0:
		return strconv.Itoa(int(int8(c))), b, nil
	case c&0xe0 == 0xa0:
		rest = b
		return str(int(c & 0x1f))
	case c >= 0xcc && c <= 0xcf:
		return strconv.FormatUint(x, 10), rest, nil
	case c >= 0xd0 && c <= 0xd3:
		shift := 64 - 8*size
		return strconv.FormatInt(int64(x<<shift)>>shift, 10), rest, nil
	case c == 0xcb:
		return strconv.FormatFloat(math.Float64frombits(x), 'f', -1, 64), rest, nil
	case c == 0xca:
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(x))), 'f', -1, 32), rest, nil
	case c >= 0xd9 && c <= 0xdb:
		return str(int(x))
	}
	return "", nil, fmt.Errorf("type 0x%02x, want a string or a number", c)
}

// packPairs returns names and values as a MessagePack map, as the store
// writes it: a name or value that is a decimal integer as an integer,
// else as a string.
func packPairs(names, values []string) string {
	b := []byte{0xdf, 0, 0, 0, 0}
	binenc.BigEndian.PutUint32(b[1:], uint32(len(names)))
	for i, n := range names {
		b = packScalar(packScalar(b, n), values[i])
	}
	return string(b)
}

// packScalar appends s to b: an integer as int64, else a string.
func packScalar(b []byte, s string) []byte {
	if x, err := strconv.ParseInt(s, 10, 64); err == nil {
		b = append(b, 0xd3)
		return binenc.BigEndian.AppendUint64(b, uint64(x))
	}
	b = append(b, 0xdb)
	b = binenc.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
