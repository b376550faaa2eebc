package main

import (
	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/server"
)

// addCounterStoreFlags adds the flags of the counter store and its fail
// modes (--store, --max-keys, --redis-*, --fail-mode, --local-share) to
// f, bound to cfg: `serve` and `rls` build the same stores.
func addCounterStoreFlags(f *pflag.FlagSet, cfg *server.Config) {
	f.Var(&cfg.Store, "store", "counter store: memory (this process) or redis (shared by a fleet of gateways)")
	f.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "most counters the memory store keeps; beyond it unknown callers share one overflow counter")
	f.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "redis store: redis://[[user]:password@]host[:port][/db], rediss:// for TLS")
	f.StringSliceVar(&cfg.RedisAddrs, "redis-addrs", cfg.RedisAddrs, "redis store: comma-separated host:port of Redis Cluster seed nodes (--redis-cluster) or Sentinels (--redis-sentinel-master)")
	f.BoolVar(&cfg.RedisCluster, "redis-cluster", cfg.RedisCluster, "redis store: the servers are a Redis Cluster")
	f.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", cfg.RedisSentinelMaster, "redis store: the master name that the Sentinels at --redis-addrs watch")
	f.StringVar(&cfg.RedisUsername, "redis-username", cfg.RedisUsername, "redis store: ACL user (replaces the URL's)")
	f.StringVar(&cfg.RedisPassword, "redis-password", cfg.RedisPassword, "redis store: password (replaces the URL's); prefer GATEWAY_REDIS_PASSWORD to a flag")
	f.BoolVar(&cfg.RedisTLS, "redis-tls", cfg.RedisTLS, "redis store: connect to --redis-addrs with TLS")
	f.DurationVar(&cfg.RedisTimeout, "redis-timeout", cfg.RedisTimeout, "redis store: longest wait for Redis's answer to one command on an open connection before --fail-mode decides")
	f.DurationVar(&cfg.RedisDialTimeout, "redis-dial-timeout", cfg.RedisDialTimeout, "redis store: longest wait to dial a Redis connection, and for the check at start that opens the connections and loads the script")
	f.DurationVar(&cfg.RedisPoolTimeout, "redis-pool-timeout", cfg.RedisPoolTimeout, "redis store: longest wait for a free Redis connection when all are busy")
	f.IntVar(&cfg.RedisLeases, "redis-leases", cfg.RedisLeases, "redis store: most keys of fixed_window and sliding_window limits this gateway holds leases for (see README, Leases); -1 turns leases off")
	f.IntVar(&cfg.RedisBatch, "redis-batch", cfg.RedisBatch, "redis store: most decisions sent to one Redis node in one round trip while another is in flight; 1 sends each alone")
	f.IntVar(&cfg.RedisMaxKeys, "redis-max-keys", cfg.RedisMaxKeys, "redis store: most counters of callers (per-IP, header, query and claim keys) Redis keeps for the whole fleet; beyond it new callers share their rule's overflow counter; -1 for no budget")
	f.Var(&cfg.FailMode, "fail-mode", "redis store: when Redis fails, local (limit in memory with limit × --local-share), open (admit) or closed (503)")
	f.Var((*server.LocalShare)(&cfg.LocalShare), "local-share", "the share of each limit one gateway admits under --fail-mode local: auto (1 / the number of gateways last seen in Redis) or a number in (0, 1]")
}
