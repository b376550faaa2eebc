package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewCounterType is the Redis type SetFields gives a counter key that does
// not exist yet: "hash" (one hash field per field) or "string" (the fields
// as space-separated alternating names and values, "_id x t 5").
const NewCounterType = "string"

// Fields returns the fields of the counter at key, whichever type it is: a
// hash's fields, or a string's space-separated alternating names and
// values. A key that does not exist has no fields. Any other type, or a
// string that does not hold pairs, is an error.
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
// space (a string counter separates them with spaces).
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
		var b strings.Builder
		for i, n := range names {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(n + " " + values[i])
		}
		if err := c.Set(ctx, key, b.String(), redis.KeepTTL).Err(); err != nil {
			return fmt.Errorf("redistest: SET %s: %w", key, err)
		}
		return nil
	default:
		return fmt.Errorf("redistest: key %s is a %s, not a counter (a hash or a string)", key, typ)
	}
}

// parsePairs splits a string counter's value into its field names and
// values, in their order. The empty string holds no fields.
func parsePairs(s string) (names, values []string, err error) {
	if s == "" {
		return nil, nil, nil
	}
	words := strings.Split(s, " ")
	if len(words)%2 != 0 {
		return nil, nil, fmt.Errorf("%d words in %q, want name and value pairs", len(words), s)
	}
	seen := make(map[string]bool, len(words)/2)
	for i := 0; i < len(words); i += 2 {
		n, v := words[i], words[i+1]
		if n == "" || v == "" {
			return nil, nil, fmt.Errorf("an empty name or value in %q (two spaces in a row, or one at an end)", s)
		}
		if seen[n] {
			return nil, nil, fmt.Errorf("field %s twice in %q", n, s)
		}
		seen[n] = true
		names, values = append(names, n), append(values, v)
	}
	return names, values, nil
}
