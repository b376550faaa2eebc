package config

import (
	"errors"
	"fmt"
	"os"

	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// DefaultMaxBytes is the default largest rule file LoadMax reads: far
// above any hand-written rule file (the example is 3 KiB), and small
// enough that reading and parsing one cannot take the gateway's memory.
const DefaultMaxBytes = 16 << 20

// LoadMax is Load for a file of at most maxBytes bytes; a larger one is an
// error, and nothing beyond maxBytes+1 bytes of it is read. Like every
// file the gateway reads, it must be a regular file (safefile.Read).
func LoadMax(path string, maxBytes int64) (*Rules, error) {
	data, err := safefile.Read(path, maxBytes)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("rules %s: the file is larger than %d bytes (--max-rules-bytes); the rules in force stay", path, maxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("reading rules %s: %w", path, err)
	}
	return Parse(path, data)
}

// FallbackPath is the Path of the rules LoadOrFallback falls back to.
const FallbackPath = "built-in:ratelimiter-rule.yaml"

// LoadOrFallback is LoadMax, except that when the file does not exist and
// fallback is not nil it parses fallback instead (the rules built into the
// binary), reporting that it did. Only a first load should fall back: a
// rule file deleted later must not bring the built-in rules into force.
func LoadOrFallback(path string, maxBytes int64, fallback []byte) (r *Rules, fellBack bool, err error) {
	r, err = LoadMax(path, maxBytes)
	if err != nil && fallback != nil && errors.Is(err, os.ErrNotExist) {
		r, err = Parse(FallbackPath, fallback)
		return r, true, err
	}
	return r, false, err
}
