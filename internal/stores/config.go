package stores

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
)

// Config holds the store settings that `gateway serve` and `gateway rls`
// take alike (--store, --max-keys, --redis-*, --fail-mode,
// --local-share). Start from DefaultConfig: its values are the flags'
// defaults.
type Config struct {
	// Store is the counter store. Default StoreMemory.
	Store StoreKind
	// MaxKeys caps the memory store's keys (and, under FailMode local,
	// the in-memory fallback's). Default limit.DefaultMaxKeys.
	MaxKeys int
	// RedisURL is redis://[[user]:password@]host[:port][/db], or rediss://
	// for TLS. With RedisAddrs too, it gives only the scheme, credentials
	// and database.
	RedisURL string
	// RedisAddrs are host:port addresses: Redis Cluster seed nodes (with
	// RedisCluster) or Sentinels (with RedisSentinelMaster).
	RedisAddrs []string
	// RedisCluster makes the addresses those of a Redis Cluster.
	RedisCluster bool
	// RedisSentinelMaster is the master's name for Redis Sentinel.
	RedisSentinelMaster string
	// RedisUsername and RedisPassword, when set, replace the URL's.
	RedisUsername, RedisPassword string
	// RedisTLS connects to RedisAddrs with TLS.
	RedisTLS bool
	// RedisTimeout bounds one Redis command on an established connection.
	// Default redisstore.DefaultTimeout.
	RedisTimeout time.Duration
	// RedisMaxTimeout is the longest a decision waits for Redis's answer
	// as the wait adapts to Redis's round trips (--redis-timeout-max).
	RedisMaxTimeout time.Duration
	// RedisDialTimeout bounds dialling a connection to Redis, and the
	// check at start that dials the pool and loads the script. Default
	// redisstore.DefaultDialTimeout.
	RedisDialTimeout time.Duration
	// RedisPoolTimeout bounds the wait for a free Redis connection.
	// Default redisstore.DefaultPoolTimeout.
	RedisPoolTimeout time.Duration
	// RedisBatch is the most decisions one round trip to a Redis node
	// carries (redisstore.Config.MaxBatch); 1 turns batching off.
	// Default redisstore.DefaultBatch.
	RedisBatch int
	// RedisLeases is the most keys the Redis store holds leases for
	// (redisstore.Config.Leases); -1 turns leases off. Default
	// redisstore.DefaultLeases.
	RedisLeases int
	// RedisLayout is how counters are kept in Redis
	// (redisstore.Config.Layout): "string", or "hash" during a rolling
	// upgrade from a release that kept hashes. Default "string".
	RedisLayout string
	// RedisMaxKeys is the key budget in Redis (redisstore.Config.MaxKeys):
	// a new caller's counter is created only while the database holds
	// fewer than this many keys, counting every key of it; on a Cluster,
	// each master's. -1 for none. Default redisstore.DefaultMaxKeys.
	RedisMaxKeys int
	// FailMode is what the redis store's failures do to a request.
	// Default failmode.Local.
	FailMode failmode.Mode
	// LocalShare scales each limit under FailMode local, in (0, 1]; 0
	// (auto, the default) is 1 / the number of gateways last seen in the
	// fleet (redisstore.Store.FleetSize), ruleset.DefaultLocalShare until one is.
	LocalShare float64
	// SlotTTL is how long the Redis store's slots of requests in flight
	// live after they were taken or last renewed, at least a second;
	// `serve` sets its --upstream-timeout. Zero: a second.
	SlotTTL time.Duration
	// Logger is the one logger. nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the store settings with no flags: the flags'
// defaults.
func DefaultConfig() Config {
	return Config{
		Store:            StoreMemory,
		MaxKeys:          limit.DefaultMaxKeys,
		RedisTimeout:     redisstore.DefaultTimeout,
		RedisMaxTimeout:  redisstore.DefaultMaxTimeout,
		RedisDialTimeout: redisstore.DefaultDialTimeout,
		RedisPoolTimeout: redisstore.DefaultPoolTimeout,
		RedisBatch:       redisstore.DefaultBatch,
		RedisLeases:      redisstore.DefaultLeases,
		RedisLayout:      redisstore.LayoutString,
		RedisMaxKeys:     redisstore.DefaultMaxKeys,
		FailMode:         failmode.Local,
	}
}

// Validate reports the first store setting of c (--store, --max-keys,
// --redis-*, --local-share) that cannot work, naming its flag.
func (c *Config) Validate() error {
	switch {
	case c.LocalShare != 0 && !(c.LocalShare > 0 && c.LocalShare <= 1):
		return fmt.Errorf("--local-share %v is outside (0, 1]", c.LocalShare)
	case c.MaxKeys <= 0:
		return fmt.Errorf("--max-keys %d is not positive", c.MaxKeys)
	case c.RedisTimeout <= 0:
		return fmt.Errorf("--redis-timeout %s is not positive", c.RedisTimeout)
	case c.RedisMaxTimeout < 0:
		return fmt.Errorf("--redis-timeout-max %s is negative", c.RedisMaxTimeout)
	case c.RedisDialTimeout <= 0:
		return fmt.Errorf("--redis-dial-timeout %s is not positive", c.RedisDialTimeout)
	case c.RedisPoolTimeout <= 0:
		return fmt.Errorf("--redis-pool-timeout %s is not positive", c.RedisPoolTimeout)
	case c.RedisBatch < 1:
		return fmt.Errorf("--redis-batch %d is below 1", c.RedisBatch)
	case c.RedisLeases < -1 || c.RedisLeases == 0:
		return fmt.Errorf("--redis-leases %d: want a number of keys, or -1 for no leases", c.RedisLeases)
	case c.RedisLayout != redisstore.LayoutString && c.RedisLayout != redisstore.LayoutHash:
		return fmt.Errorf("--redis-layout %q: want %s, or %s during a rolling upgrade from a release that kept hashes (docs/fleet.md, Upgrading)", c.RedisLayout, redisstore.LayoutString, redisstore.LayoutHash)
	case c.RedisMaxKeys == 0 || c.RedisMaxKeys < -1:
		return fmt.Errorf("--redis-max-keys %d is not positive (-1 for no budget)", c.RedisMaxKeys)
	}
	return nil
}

// StoreKind names a counter store. It is a pflag.Value.
type StoreKind string

// The stores.
const (
	StoreMemory StoreKind = "memory"
	StoreRedis  StoreKind = "redis"
)

func (k StoreKind) String() string { return string(k) }

// Set parses a --store value.
func (k *StoreKind) Set(s string) error { return enumflag.Set(k, s, StoreMemory, StoreRedis) }

// Type names the value's kind in help text.
func (*StoreKind) Type() string { return "store" }

// LocalShare is --local-share: "auto" (0) or a number in (0, 1]. It is a
// pflag.Value.
type LocalShare float64

func (s LocalShare) String() string {
	if s == 0 {
		return "auto"
	}
	return strconv.FormatFloat(float64(s), 'g', -1, 64)
}

// Set parses a --local-share value.
func (s *LocalShare) Set(v string) error {
	if v == "auto" {
		*s = 0
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		return fmt.Errorf("%q is neither auto nor a number in (0, 1]", v)
	}
	*s = LocalShare(f)
	return nil
}

// Type names the value's kind in help text.
func (*LocalShare) Type() string { return "auto|share" }

// Health is what /readyz says about the store.
type Health struct {
	// Store is the store's name: memory or redis.
	Store string `json:"store"`
	// Reachable reports whether the store answered just now: for a
	// Redis Cluster, at least one of its masters.
	Reachable bool `json:"reachable"`
	// Circuit is the state of the store's circuit breaker, "closed" or
	// "open"; empty for a store without one.
	Circuit string `json:"circuit,omitempty"`
	// FailMode is --fail-mode, for a store that can fail.
	FailMode string `json:"failMode,omitempty"`
	// Serving reports whether requests are served: the store is
	// reachable, or the fail mode serves without it (open, local).
	Serving bool `json:"serving"`
	// Error is why the store is not reachable; for a Redis Cluster
	// that is reachable, which masters did not answer, if any.
	Error string `json:"error,omitempty"`
}
