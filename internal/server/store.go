package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
)

// stores are the stores New built from Config.
type stores struct {
	store    limit.Store   // what the handler asks
	mem      *limit.Memory // the memory store, or the local fallback; nil if none
	redis    *limit.Redis  // the redis store, if it is the one
	local    limit.Store   // the handler's Local store (FailLocal only)
	failMode proxy.FailMode
	name     StoreKind
}

// newStore builds the store of cfg.Store. onCircuit is called when the
// redis store's circuit breaker opens or closes.
func newStore(cfg Config, onCircuit func(open bool)) (*stores, error) {
	st := &stores{name: cfg.Store}
	switch cfg.Store {
	case StoreMemory:
		mem, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
		if err != nil {
			return nil, fmt.Errorf("--max-keys: %w", err)
		}
		st.store, st.mem = mem, mem
	case StoreRedis:
		red, err := limit.NewRedis(limit.RedisConfig{
			URL: cfg.RedisURL, Addrs: cfg.RedisAddrs, Cluster: cfg.RedisCluster,
			SentinelMaster: cfg.RedisSentinelMaster, Username: cfg.RedisUsername,
			Password: cfg.RedisPassword, TLS: cfg.RedisTLS, Timeout: cfg.RedisTimeout,
			DialTimeout: cfg.RedisDialTimeout, PoolTimeout: cfg.RedisPoolTimeout,
			OnCircuitChange: onCircuit, Logger: cfg.Logger,
			OnNodeCircuitChange: func(node string, open bool) {
				if open {
					cfg.Logger.Warn("redis node's circuit breaker open: deciding its keys by --fail-mode until a probe finds it back", "node", node, "fail_mode", cfg.FailMode.String())
				} else {
					cfg.Logger.Info("redis node's circuit breaker closed: it answers again", "node", node)
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("--store redis: %w", err)
		}
		st.store, st.redis, st.failMode = red, red, cfg.FailMode
		if cfg.FailMode == proxy.FailLocal {
			mem, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
			if err != nil {
				red.Close()
				return nil, fmt.Errorf("--max-keys: %w", err)
			}
			st.mem, st.local = mem, mem
		}
	default:
		return nil, fmt.Errorf("--store %q is not one of memory, redis", cfg.Store)
	}
	return st, nil
}

// start makes the Redis store ready before the gateway serves: it dials
// the connections and loads the script, within --redis-dial-timeout. If
// Redis does not answer, the gateway serves by --fail-mode and keeps
// trying every second in the background until ctx is done, logging when
// Redis is reachable again.
func (st *stores) start(ctx context.Context, log *slog.Logger) {
	if st.redis == nil {
		return
	}
	err := st.redis.Ready(ctx)
	if err == nil {
		log.Info("redis ready: connections open, script loaded")
		return
	}
	log.Warn("redis unreachable at start; serving by --fail-mode until it answers", "err", err, "fail_mode", st.failMode.String())
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if st.redis.Ready(ctx) == nil {
					log.Info("redis reachable again: connections open, script loaded")
					return
				}
			}
		}
	}()
}

// keys returns the number of counters the store keeps in this process:
// the memory store's; Redis's are in Redis.
func (st *stores) keys() int {
	if st.redis == nil && st.mem != nil {
		return st.mem.Len()
	}
	return 0
}

// forget returns the memory store's Forget, for the reloader to release
// the counters of removed rules; nil for Redis, whose keys expire.
func (st *stores) forget() func(keep func(key string) bool) int {
	if st.redis == nil && st.mem != nil {
		return st.mem.Forget
	}
	return nil
}

// health reports on the store for /readyz.
func (st *stores) health(ctx context.Context) StoreHealth {
	if st.redis == nil {
		return StoreHealth{Store: string(st.name), Reachable: true, Serving: true}
	}
	h := StoreHealth{Store: string(st.name), Circuit: "closed", FailMode: st.failMode.String()}
	if st.redis.CircuitOpen() {
		h.Circuit = "open"
	}
	if err := st.redis.Ping(ctx); err != nil {
		h.Error = err.Error()
	} else {
		h.Reachable = true
	}
	h.Serving = h.Reachable || st.failMode != proxy.FailClosed
	return h
}

func (st *stores) close() error {
	if st.redis != nil {
		return st.redis.Close()
	}
	return nil
}
