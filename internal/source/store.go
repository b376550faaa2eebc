package source

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// Store is a source whose rules can also be written: the rule store that
// `gateway rules` reads, writes, lists and restores (docs/sources.md, "Rules
// for a fleet"). Every write is a compare-and-set on the version read,
// and keeps the value it replaces, so that two operators cannot silently
// overwrite each other and a bad change can be rolled back.
type Store interface {
	Source
	// Key is the key (or path) of the rules in the store: its extension,
	// if any, gives their format (Parse).
	Key() string
	// Get reads the current value. A key that does not exist is a Value
	// of version NoVersion, not an error.
	Get(ctx context.Context) (Value, error)
	// Put writes data in place of prev, the value read before, if prev
	// is still the current value (prev.Version NoVersion: if there is
	// none), and returns the new version. It keeps prev in the history
	// in the same atomic write, and drops all but the keep newest values
	// there. If prev is no longer current, it writes nothing and returns
	// a *ConflictError.
	Put(ctx context.Context, data []byte, prev Value, keep int) (version int64, err error)
	// History returns the values that writes replaced and that are still
	// kept, newest first.
	History(ctx context.Context) ([]Value, error)
}

// NoVersion is the version of a key that does not exist.
const NoVersion int64 = -1

// Value is the rules in a store at one version.
type Value struct {
	// Data is the rules, as written.
	Data []byte
	// Version is the store's version of the key when Data was its value
	// (an etcd mod revision, a znode's data version), or NoVersion when
	// the key does not exist.
	Version int64
}

// ConflictError is a write refused because the key's version is not the
// one the writer expected: someone else wrote the rules in between.
type ConflictError struct {
	// Source names the store and key (Source.String).
	Source string
	// Expected is the version the writer read or named; Current the
	// version found. Either is NoVersion for a key that did not exist.
	Expected, Current int64
}

func (e *ConflictError) Error() string {
	switch {
	case e.Current == NoVersion:
		return fmt.Sprintf("%s: the rules are no longer there (expected version %d): someone deleted them; nothing was written", e.Source, e.Expected)
	case e.Expected == NoVersion:
		return fmt.Sprintf("%s: the rules were created by someone else meanwhile (version %d); nothing was written: read them (gateway rules get), merge, and push with --expect-version %d", e.Source, e.Current, e.Current)
	}
	return fmt.Sprintf("%s: the rules are at version %d, not %d: someone changed them; nothing was written: read them (gateway rules get), merge, and push with --expect-version %d", e.Source, e.Current, e.Expected, e.Current)
}

// Parse parses rules read from a store's key, as the gateway does: in
// the format the key's extension gives, or else the one data looks like
// (config.FormatOf), naming them name in errors. `gateway rules push`
// checks a file with it, so that it accepts exactly what the gateways do.
func Parse(name, key string, data []byte) (*config.Rules, error) {
	return config.ParseFormat(name, config.FormatOf(key, data), data)
}

// FormatVersion formats a version for people: a number, or "none".
func FormatVersion(v int64) string {
	if v == NoVersion {
		return "none"
	}
	return strconv.FormatInt(v, 10)
}

// NewStore opens the rule store cfg.Spec names, as New does; a spec that
// names a file is an error.
func NewStore(cfg Config) (Store, error) {
	if !IsStore(cfg.Spec) {
		return nil, fmt.Errorf("%s is not a rule store: name one as etcd://host:2379/key or zk://host:2181/path", cfg.Spec)
	}
	src, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return src.(Store), nil
}
