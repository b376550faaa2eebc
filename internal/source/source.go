// Package source is where the gateway's rules come from: a rule file
// (the default), a key in etcd or a znode in ZooKeeper (docs/sources.md,
// "Rules for a fleet"). Each
// source loads and validates the rules, and says when they may have
// changed; the server's Reloader then compiles and swaps them in, so that
// every source goes through the same path as a file edit.
//
// A source must not compile or swap rules itself, nor hand over rules it
// has not validated: a bad rule set never replaces good rules.
package source

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// Source is where rules come from. Implementations are safe for
// concurrent use.
type Source interface {
	// Load reads and validates the rules. version identifies what was
	// read (an etcd mod revision, a file's sha256). On error the caller
	// keeps the rules it has.
	Load(ctx context.Context) (rules *config.Rules, version string, err error)
	// Watch calls onChange whenever the rules may have changed, until
	// ctx is done. It returns an error only if it cannot watch at all.
	Watch(ctx context.Context, onChange func()) error
	// Status reports the source's state for /rules, /readyz and the
	// metrics.
	Status() Status
	// String names the source without credentials.
	String() string
	// Close releases its connections.
	Close() error
}

// Status is what a source reports about itself.
type Status struct {
	// Source names it (String).
	Source string `json:"source"`
	// Version is the version of the last good load.
	Version string `json:"version,omitempty"`
	// Connected reports whether the source answered its last request;
	// always true for a file.
	Connected bool `json:"connected"`
	// FromCache reports whether the rules in force came from the rules
	// cache, the store being unreachable at start.
	FromCache bool `json:"fromCache,omitempty"`
	// Error is why the source is not connected.
	Error string `json:"error,omitempty"`
	// Since is when Connected last changed.
	Since time.Time `json:"since"`
}

// Config configures the source New opens.
type Config struct {
	// Spec is --config: a file path, etcd://host:port[,host:port]/key
	// (etcds:// for TLS) or zk://host:port[,host:port]/path (zks:// for
	// TLS).
	Spec string
	// MaxBytes is the largest rules read. Default config.DefaultMaxBytes.
	MaxBytes int64
	// CacheFile, if not empty, is where a store source writes the rules
	// of every good load, and reads them at start when the store is
	// unreachable. Ignored for files.
	CacheFile string
	// Etcd holds the credentials and TLS settings of an etcd source.
	Etcd EtcdAuth
	// ZK holds the credentials and TLS settings of a ZooKeeper source.
	ZK ZKAuth
	// Timeout bounds one request to a store. Default DefaultTimeout.
	Timeout time.Duration
	// ProbeInterval is how often a store source checks that the store
	// answers. Default DefaultProbeInterval.
	ProbeInterval time.Duration
	// Logger is the one logger. Default slog.Default().
	Logger *slog.Logger
}

// IsStore reports whether spec names a store rather than a file.
func IsStore(spec string) bool {
	return strings.HasPrefix(spec, "etcd://") || strings.HasPrefix(spec, "etcds://") || isZK(spec)
}

func isZK(spec string) bool {
	return strings.HasPrefix(spec, "zk://") || strings.HasPrefix(spec, "zks://")
}

// CheckSpec reports what is wrong with the URL of a store, without
// contacting it.
func CheckSpec(spec string) error {
	if isZK(spec) {
		_, _, _, err := ParseZKURL(spec)
		return err
	}
	_, _, _, err := ParseEtcdURL(spec)
	return err
}

// New opens the source cfg.Spec names. It does not contact a store: Load
// does.
func New(cfg Config) (Source, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = config.DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case isZK(cfg.Spec):
		return NewZK(cfg)
	case IsStore(cfg.Spec):
		return NewEtcd(cfg)
	case strings.Contains(cfg.Spec, "://"):
		scheme, _, _ := strings.Cut(cfg.Spec, "://")
		return nil, fmt.Errorf("--config %s: the scheme %s:// is not supported; name a file, etcd://host:2379/key or zk://host:2181/path", cfg.Spec, scheme)
	}
	return NewFile(cfg.Spec, cfg.MaxBytes, cfg.Logger), nil
}
