package stores

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// stores are the stores New built from Config.
type stores struct {
	store limit.Store       // what the handler asks
	mem   *limit.Memory     // the memory store, or the local fallback; nil if none
	redis *redisstore.Store // the redis store, if it is the one
	local limit.Store       // the handler's Local store (FailLocal only)
	// slots and localSlots are the handler's Slots and LocalSlots
	// (concurrency.go); nil for the handler's defaults.
	slots, localSlots limit.Slots
	redisSlots        *redisstore.Slots
	failMode          failmode.Mode
	name              StoreKind
	// ping bounds /readyz's ping of Redis (readyPing).
	ping time.Duration
	// batches observes the size of the Redis store's batches.
	batches prometheus.Histogram
	// log is Config.Logger.
	log *slog.Logger
}

// newStore builds the store of cfg.Store. onCircuit is called when the
// redis store's circuit breaker opens or closes.
func newStore(cfg Config, onCircuit func(open bool)) (*stores, error) {
	st := &stores{name: cfg.Store, ping: max(readyPing, cfg.RedisTimeout), log: cfg.Logger}
	switch cfg.Store {
	case StoreMemory:
		mem, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
		if err != nil {
			return nil, fmt.Errorf("--max-keys: %w", err)
		}
		st.store, st.mem = mem, mem
	case StoreRedis:
		st.batches = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_redis_batch_size",
			Help:    "Decisions per round trip to a Redis node that carried more than one (--redis-batch).",
			Buckets: prometheus.ExponentialBuckets(2, 2, 10),
		})
		red, err := redisstore.New(redisstore.Config{
			MaxBatch: cfg.RedisBatch, Leases: cfg.RedisLeases, Layout: cfg.RedisLayout, OnBatch: func(n int) { st.batches.Observe(float64(n)) },
			URL: cfg.RedisURL, Addrs: cfg.RedisAddrs, Cluster: cfg.RedisCluster,
			SentinelMaster: cfg.RedisSentinelMaster, Username: cfg.RedisUsername,
			Password: cfg.RedisPassword, TLS: cfg.RedisTLS, Timeout: cfg.RedisTimeout,
			DialTimeout: cfg.RedisDialTimeout, PoolTimeout: cfg.RedisPoolTimeout,
			MaxTimeout:      max(cfg.RedisMaxTimeout, cfg.RedisTimeout),
			MaxKeys:         cfg.RedisMaxKeys,
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
		if err := st.newRedisSlots(cfg); err != nil {
			red.Close()
			return nil, err
		}
		if cfg.FailMode == failmode.Local {
			mem, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
			if err != nil {
				red.Close()
				return nil, fmt.Errorf("--max-keys: %w", err)
			}
			st.mem = mem
			st.local = &fleetShare{mem: mem, red: red, auto: cfg.LocalShare == 0, fixed: cfg.LocalShare}
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
		// The checks log first, so that "redis ready" follows what they
		// found.
		st.checkRedis(ctx, log)
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
					st.checkRedis(ctx, log)
					return
				}
			}
		}
	}()
}

// compileShare returns the local share to compile the rules with: --local-share,
// or 1 when it is auto, since fleetShare then scales the limits.
func compileShare(cfg Config) float64 {
	if cfg.LocalShare == 0 {
		return 1
	}
	return cfg.LocalShare
}

// fleetShare is the local store of --fail-mode local on Redis: the memory
// store, deciding each limit on this gateway's share of what the fleet
// has (docs/fleet.md, "When Redis fails"). With --local-share auto (auto)
// it scales each limit (and burst) by 1 / the fleet size last seen in
// Redis, rounded up, once this gateway has seen the whole fleet
// (redisstore.Store.FleetSeen), and by at most ruleset.DefaultLocalShare
// before; otherwise the limits come scaled by --local-share (fixed).
// Then a limit Redis last said had R of its capacity left
// (redisstore.Store.Known) admits at most ⌈share × R⌉: none while Redis
// last said the counter was full, until the instant Redis gave; a bucket's
// R grows as it refills from what Redis said, and its bucket in memory is
// brought down to ⌈share × R⌉ (level) before it decides, so that it refills
// from there rather than from full. The
// counts survive a change of the share: a limit's counter does not
// depend on its limit (limit.Params.Identity).
type fleetShare struct {
	mem   *limit.Memory
	red   *redisstore.Store
	auto  bool
	fixed float64 // --local-share when not auto
	// levelMu makes level's read and charge one step: requests that
	// level a bucket at once would each charge all it holds above the
	// level, and put it in debt.
	levelMu sync.Mutex
}

var _ limit.Store = (*fleetShare)(nil)

// share returns the share of each limit this gateway admits on its own.
func (f *fleetShare) share() float64 {
	if !f.auto {
		return f.fixed
	}
	// Seen before the size: a heartbeat stores the size before it counts
	// itself, so that a size read after a second heartbeat was seen is
	// from that one or a later one, never the first, at which this
	// gateway may have found itself alone.
	seen := f.red.FleetSeen()
	n := f.red.FleetSize()
	switch {
	case n > 0 && seen:
		return 1 / float64(n)
	case n > 0:
		return min(1/float64(n), ruleset.DefaultLocalShare)
	}
	return ruleset.DefaultLocalShare
}

// Allow decides reqs in memory on this gateway's share of what the
// fleet has. It runs only while Redis does not decide, so its copies cost
// nothing that matters.
func (f *fleetShare) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result) (bool, error) {
	share := f.share()
	scaled := make([]limit.Request, len(reqs))
	params := make([]limit.Params, len(reqs))
	var full []bool // the limits Redis last said were full, if any is
	for i := range reqs {
		q := &reqs[i]
		params[i] = *q.Params
		if f.auto {
			params[i] = q.Params.Scaled(share)
		}
		scaled[i] = *q
		scaled[i].Params = &params[i]
		if !q.Enforced() || q.Params.Limit <= 0 {
			continue
		}
		k, ok := f.red.Known(q)
		if !ok {
			continue
		}
		capacity := k.Capacity // the fleet's: the params here are scaled
		if f.auto {
			capacity = q.Params.Capacity()
		}
		var isFull bool
		var level int64
		if params[i], level, isFull = k.Bounded(params[i], share, capacity); level >= 0 {
			if err := f.level(ctx, now, &scaled[i], level); err != nil {
				return false, err
			}
		}
		if isFull {
			if full == nil {
				full = make([]bool, len(reqs))
			}
			full[i] = true
			res[i] = limit.Result{Limit: params[i].Limit, Reset: k.Reset, RetryAfter: cmp.Or(k.RetryAfter, k.Reset)}
		}
	}
	if full == nil {
		return f.mem.Allow(ctx, now, scaled, res)
	}
	// Redis said a counter was full until later: refused as Redis would,
	// counting nothing; the other limits read as they stand.
	for i := range reqs {
		if full[i] || reqs[i].Follows() {
			continue
		}
		read := []limit.Request{{Key: scaled[i].Key, Overflow: scaled[i].Overflow, Params: scaled[i].Params, Act: limit.Read}}
		if _, err := f.mem.Allow(ctx, now, read, res[i:i+1]); err != nil {
			return false, err
		}
	}
	return false, nil
}

// level brings q's bucket in memory down to hold at most n (Known.Bounded):
// what it holds above that is charged. A request admitted between a
// level's read and its charge (it takes without levelMu) makes the
// bucket hold less than n, never more.
func (f *fleetShare) level(ctx context.Context, now time.Time, q *limit.Request, n int64) error {
	f.levelMu.Lock()
	defer f.levelMu.Unlock()
	res := make([]limit.Result, 1)
	read := []limit.Request{{Key: q.Key, Overflow: q.Overflow, Params: q.Params, Act: limit.Read}}
	if _, err := f.mem.Allow(ctx, now, read, res); err != nil {
		return err
	}
	if over := res[0].Remaining - n; over > 0 {
		charge := []limit.Request{{Key: q.Key, Overflow: q.Overflow, Params: q.Params, Act: limit.Charge, Cost: over}}
		if _, err := f.mem.Allow(ctx, now, charge, res); err != nil {
			return err
		}
	}
	return nil
}

// runFleet keeps the gateway a member of the Redis fleet until ctx is
// done, logging changes of its size.
func (st *stores) runFleet(ctx context.Context, log *slog.Logger) {
	if st.redis == nil {
		return
	}
	go st.redis.RunFleet(ctx, func(n int) {
		log.Info("redis fleet size", "gateways", n, "id", st.redis.FleetID())
	})
}

// register registers the Redis store's metrics with reg: the fleet size,
// each node's breaker, the script calls per decision, and the callers
// past the key budget.
func (st *stores) register(reg prometheus.Registerer) {
	red := st.redis
	if red == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_redis_fleet_gateways",
			Help: "Gateways registered in Redis at this gateway's last heartbeat (0 before the first); --local-share auto is 1 / this.",
		}, func() float64 { return float64(red.FleetSize()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_decisions_total",
			Help: "Requests the Redis store decided, by Redis or by its deny cache.",
		}, func() float64 { return float64(red.Stats().Decisions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_calls_total",
			Help: "Script calls sent to Redis, failed ones included; / gateway_redis_decisions_total is the calls per decision.",
		}, func() float64 { return float64(red.Stats().Calls) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_round_trips_total",
			Help: "Round trips to Redis that carried script calls; fewer than gateway_redis_calls_total when calls were batched (--redis-batch).",
		}, func() float64 { return float64(red.Stats().RoundTrips) }),
		st.batches,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_lease_tokens_granted_total",
			Help: "Tokens Redis counted for this gateway's leases beyond the requests that asked (--redis-leases).",
		}, func() float64 { return float64(red.Stats().LeaseGranted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_lease_tokens_spent_total",
			Help: "Requests admitted from leases, without a call to Redis.",
		}, func() float64 { return float64(red.Stats().LeaseSpent) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_lease_tokens_expired_total",
			Help: "Leased tokens lost unspent because the bucket or window they were counted in ended first.",
		}, func() float64 { return float64(red.Stats().LeaseExpired) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_lease_tokens_returned_total",
			Help: "Leased tokens this gateway stopped using and gave back to Redis unspent.",
		}, func() float64 { return float64(red.Stats().LeaseReturned) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_written_back_total",
			Help: "Write-backs counted in Redis after it did not answer in time: requests admitted locally (--fail-mode local) that it had not counted, and the charges and releases of calls that never reached it.",
		}, func() float64 { return float64(red.Stats().WrittenBack) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_write_backs_dropped_total",
			Help: "Local admissions not written back to Redis (their bucket had ended, or the write-back's fate is unknown), and calls whose charges were not sent again after Redis left them unanswered (Redis may or may not have run them).",
		}, func() float64 { return float64(red.Stats().WriteBacksDropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_redis_overflow_total",
			Help: "Requests of new callers that Redis counted against their rule's overflow counter because the Redis database held --redis-max-keys keys (every key of it, the node's on a Cluster).",
		}, func() float64 { return float64(red.Stats().Overflowed) }),
		nodeCircuits{red},
	)
}

// nodeCircuits collects gateway_redis_node_circuit_open: one series per
// Redis node the store has used, so bounded by the nodes.
type nodeCircuits struct{ red *redisstore.Store }

var nodeCircuitDesc = prometheus.NewDesc("gateway_redis_node_circuit_open",
	"1 while the circuit breaker of this Redis node is open: its keys are decided by --fail-mode.", []string{"node"}, nil)

func (nodeCircuits) Describe(ch chan<- *prometheus.Desc) { ch <- nodeCircuitDesc }

func (c nodeCircuits) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.red.Circuits() {
		v := 0.0
		if n.Open {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(nodeCircuitDesc, prometheus.GaugeValue, v, n.Node)
	}
}

// checkRedis warns about what in Redis's settings or data works against
// the limits: eviction (checkEviction) and a crowded database
// (checkBudget).
func (st *stores) checkRedis(ctx context.Context, log *slog.Logger) {
	st.checkEviction(ctx, log)
	st.checkBudget(ctx, log)
}

// checkEviction warns about Redis nodes whose maxmemory-policy may evict
// counters (redisstore.Store.EvictionPolicy).
func (st *stores) checkEviction(ctx context.Context, log *slog.Logger) {
	nodes, err := st.redis.EvictionPolicy(ctx)
	if err != nil {
		log.Warn("cannot read redis maxmemory-policy", "err", err)
	}
	for node, policy := range nodes {
		log.Warn("redis maxmemory-policy can evict counters, which then restart from zero: set noeviction (a full Redis then fails calls, for --fail-mode to decide)",
			"node", node, "maxmemory_policy", policy)
	}
}

// checkBudget warns about Redis nodes whose database holds half the key
// budget already (redisstore.Store.CrowdedNodes).
func (st *stores) checkBudget(ctx context.Context, log *slog.Logger) {
	nodes, err := st.redis.CrowdedNodes(ctx)
	if err != nil {
		log.Warn("cannot read the size of redis's database", "err", err)
	}
	for node, keys := range nodes {
		log.Warn("redis database holds half the key budget or more already: the budget counts every key of the database, and new callers past it share their rule's overflow counter; give the gateway a database of its own or raise --redis-max-keys",
			"node", node, "keys", keys, "redis_max_keys", st.redis.MaxKeys())
	}
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

// readyPing is the longest /readyz waits for Redis to answer its ping
// (or --redis-timeout, if longer): within the 1s a Kubernetes probe waits
// by default (timeoutSeconds), so that a Redis that hangs makes a gateway
// that serves without it (--fail-mode local, open) answer ready in time,
// and one that cannot (closed) answer not ready, rather than time the
// probe out. The ping otherwise may take a dial's time too.
const readyPing = 500 * time.Millisecond

// health reports on the store for /readyz.
func (st *stores) health(ctx context.Context) Health {
	if st.redis == nil {
		return Health{Store: string(st.name), Reachable: true, Serving: true}
	}
	h := Health{Store: string(st.name), Circuit: "closed", FailMode: st.failMode.String()}
	if st.redis.CircuitOpen() {
		h.Circuit = "open"
	}
	ctx, cancel := context.WithTimeout(ctx, st.ping)
	defer cancel()
	down, err := st.redis.Ping(ctx)
	switch {
	case err != nil:
		h.Error = err.Error()
	case len(down) > 0:
		// A cluster whose other masters answer: reachable, and their
		// keys are decided by Redis (redisstore.Store.Ping).
		h.Reachable = true
		h.Error = "redis cluster masters not answering (their keys are decided by --fail-mode): " + strings.Join(down, "; ")
	default:
		h.Reachable = true
	}
	h.Serving = h.Reachable || st.failMode != failmode.Closed
	return h
}

func (st *stores) close() error {
	if st.redisSlots != nil {
		st.redisSlots.Close()
	}
	if st.redis != nil {
		before := st.redis.Stats().WriteBacksDropped
		err := st.redis.Close()
		// The metric goes with the process: the log says what Redis may
		// be missing (docs/fleet.md, A slow Redis costs once).
		if n := st.redis.Stats().WriteBacksDropped - before; n > 0 && st.log != nil {
			st.log.Error("redis store closed while Redis did not answer: write-backs it may not have counted were dropped (local admissions, charges)", "dropped", n)
		}
		return err
	}
	return nil
}
