// Package rulesctl is `gateway rules`: it reads, writes, lists and
// restores the rules in a rule store (package source), for a fleet of
// gateways that read them (docs/sources.md, "Rules for a fleet").
//
// Every value it writes is first checked exactly as the gateways check
// what they read (source.Parse, then ruleset.Compile), so that nothing it
// writes is refused by them; and every write is a compare-and-set on the
// version read, so that two operators cannot silently overwrite each
// other.
//
// It must not write what a gateway would refuse, nor write without the
// compare-and-set.
package rulesctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

// DefaultKeep is how many replaced values a write keeps in the history
// unless told otherwise (the commands' --keep-history).
const DefaultKeep = 10

// Config configures the commands.
type Config struct {
	// Store holds the rules. Required.
	Store source.Store
	// MaxBytes is the largest value the gateways read: their
	// --max-rules-bytes. Default config.DefaultMaxBytes.
	MaxBytes int64
	// Keep is how many replaced values a write keeps in the history; 0
	// keeps none (and drops those there).
	Keep int
	// Expect reports whether Push and Rollback write only if the rules
	// are at ExpectVersion (--expect-version). Either way they write
	// only if the rules are still at the version they read just before.
	Expect        bool
	ExpectVersion int64
}

// Result is what Push or Rollback did.
type Result struct {
	// Rules are the rules now in the store, compiled.
	Rules *ruleset.Set
	// Previous is the version replaced (source.NoVersion: there was
	// none); Version is the new one.
	Previous, Version int64
	// Unchanged reports whether nothing was written, the store holding
	// the same bytes already; Version is then Previous.
	Unchanged bool
}

// InvalidError is rules that Push or Rollback refused to write, the
// gateways being bound to refuse them.
type InvalidError struct {
	// Name names the rules: the file, or the version (VersionName).
	Name string
	// Err is Check's error: a config.Errors, or the compiler's error.
	Err error
}

func (e *InvalidError) Error() string { return e.Err.Error() }

func (e *InvalidError) Unwrap() error { return e.Err }

// Problems returns every problem, one a line, each at Name:line.
func (e *InvalidError) Problems() []string {
	var list config.Errors
	if !errors.As(e.Err, &list) {
		return []string{e.Err.Error()}
	}
	out := make([]string, len(list))
	for i, p := range list {
		out[i] = p.Error()
	}
	return out
}

// Check checks data, rules named name, as the gateways reading the
// store's key would check them as its value: at most maxBytes (0:
// config.DefaultMaxBytes), parsed in the format the key gives
// (source.Parse), validated and compiled. Problems are reported as a
// config.Errors, each at name:line, or as the compiler's error at
// name:line.
func Check(key, name string, data []byte, maxBytes int64) (*ruleset.Set, error) {
	if maxBytes <= 0 {
		maxBytes = config.DefaultMaxBytes
	}
	if int64(len(data)) > maxBytes {
		return nil, config.Errors{{File: name, Msg: fmt.Sprintf("%d bytes, larger than the %d the gateways read (--max-rules-bytes): they would refuse it", len(data), maxBytes)}}
	}
	parsed, err := source.Parse(name, key, data)
	if err != nil {
		return nil, err
	}
	return ruleset.Compile(parsed, time.Time{})
}

// CheckFile is Check for the rules of the file name, which must also be
// in the format the gateways would read the key in, when its extension
// names one: otherwise the file would be read otherwise than `gateway
// validate` reads it.
func CheckFile(key, name string, data []byte, maxBytes int64) (*ruleset.Set, error) {
	if own, ok := formatOfName(name); ok {
		if f := config.FormatOf(key, data); f != own {
			return nil, config.Errors{{File: name, Msg: fmt.Sprintf(
				"the file is %s but the gateways would read the key %s as %s (from %s): push %s rules there, or use a key named *.%s",
				strings.ToUpper(string(own)), key, strings.ToUpper(string(f)), formatReason(key), strings.ToUpper(string(f)), own)}}
		}
	}
	return Check(key, name, data, maxBytes)
}

// formatOfName returns the format a file's extension names, if it names
// one.
func formatOfName(name string) (config.Format, bool) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return config.FormatYAML, true
	case ".json":
		return config.FormatJSON, true
	case ".xml":
		return config.FormatXML, true
	}
	return "", false
}

// formatReason says why the gateways read key's value in the format they
// do.
func formatReason(key string) string {
	if _, ok := formatOfName(key); ok {
		return "its extension"
	}
	return "the first character of the value"
}

// Get reads the rules in the store; their absence is an error.
func Get(ctx context.Context, st source.Store) (source.Value, error) {
	v, err := st.Get(ctx)
	if err == nil && v.Version == source.NoVersion {
		err = fmt.Errorf("%s: there are no rules there yet: write them with gateway rules push", st)
	}
	return v, err
}

// Push checks data, the rules of the file name (CheckFile), and only if they
// are valid writes them to the store, if the store's rules are still at
// the version read just before (and at cfg.ExpectVersion, with
// cfg.Expect). A conflict is a *source.ConflictError naming the current
// version.
func Push(ctx context.Context, cfg Config, name string, data []byte) (Result, error) {
	rs, err := CheckFile(cfg.Store.Key(), name, data, cfg.MaxBytes)
	if err != nil {
		return Result{}, &InvalidError{Name: name, Err: err}
	}
	return write(ctx, cfg, rs, data)
}

// Rollback writes the value the store's history keeps for version, checked
// again (Check) and with the same compare-and-set as Push, unless it is
// the current one.
func Rollback(ctx context.Context, cfg Config, version int64) (Result, error) {
	cur, err := cfg.Store.Get(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := expect(cfg, cur); err != nil {
		return Result{}, err
	}
	if version == cur.Version {
		return Result{Previous: cur.Version, Version: cur.Version, Unchanged: true}, nil
	}
	hist, err := cfg.Store.History(ctx)
	if err != nil {
		return Result{}, err
	}
	var old *source.Value
	for i := range hist {
		if hist[i].Version == version {
			old = &hist[i]
		}
	}
	if old == nil {
		return Result{}, fmt.Errorf("%s: version %d is not in the history; gateway rules history lists the versions kept", cfg.Store, version)
	}
	name := VersionName(cfg.Store, version)
	rs, err := Check(cfg.Store.Key(), name, old.Data, cfg.MaxBytes)
	if err != nil {
		return Result{}, &InvalidError{Name: name, Err: err}
	}
	return write(ctx, cfg, rs, old.Data)
}

// VersionName names one version of the store's rules in messages:
// etcd://host:2379/key@41.
func VersionName(st source.Store, version int64) string {
	return fmt.Sprintf("%s@%d", st, version)
}

// write writes data, the rules rs, with compare-and-set on the version
// it reads first.
func write(ctx context.Context, cfg Config, rs *ruleset.Set, data []byte) (Result, error) {
	cur, err := cfg.Store.Get(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := expect(cfg, cur); err != nil {
		return Result{}, err
	}
	if cur.Version != source.NoVersion && bytes.Equal(cur.Data, data) {
		return Result{Rules: rs, Previous: cur.Version, Version: cur.Version, Unchanged: true}, nil
	}
	v, err := cfg.Store.Put(ctx, data, cur, cfg.Keep)
	if err != nil {
		return Result{}, err
	}
	return Result{Rules: rs, Previous: cur.Version, Version: v}, nil
}

// expect checks cur against cfg's --expect-version.
func expect(cfg Config, cur source.Value) error {
	if cfg.Expect && cur.Version != cfg.ExpectVersion {
		return &source.ConflictError{Source: cfg.Store.String(), Expected: cfg.ExpectVersion, Current: cur.Version}
	}
	return nil
}

// Entry is one version of the rules: the current one or one the history
// keeps.
type Entry struct {
	Version int64
	// Current reports whether it is the value in the store now.
	Current bool
	Bytes   int
	// SHA256 is the hex digest of the value, as GET /rules shows it.
	SHA256 string
	// Err is why the gateways would refuse it now (Check), if they would.
	Err error
}

// History lists the current rules and those the history keeps, newest
// first, each checked as Rollback would check it.
func History(ctx context.Context, cfg Config) ([]Entry, error) {
	cur, err := cfg.Store.Get(ctx)
	if err != nil {
		return nil, err
	}
	hist, err := cfg.Store.History(ctx)
	if err != nil {
		return nil, err
	}
	var out []Entry
	if cur.Version != source.NoVersion {
		out = append(out, NewEntry(cfg, cur, true))
	}
	for _, v := range hist {
		out = append(out, NewEntry(cfg, v, false))
	}
	return out, nil
}

// NewEntry describes v, checked as the store's value.
func NewEntry(cfg Config, v source.Value, current bool) Entry {
	sum := sha256.Sum256(v.Data)
	_, err := Check(cfg.Store.Key(), VersionName(cfg.Store, v.Version), v.Data, cfg.MaxBytes)
	return Entry{Version: v.Version, Current: current, Bytes: len(v.Data), SHA256: hex.EncodeToString(sum[:]), Err: err}
}
