package limit

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of RedisConfig.
const (
	DefaultRedisTimeout      = 25 * time.Millisecond
	DefaultRedisDialTimeout  = time.Second
	DefaultRedisPoolTimeout  = time.Second
	DefaultRedisWarmConns    = 10
	DefaultBreakerThreshold  = 5
	DefaultBreakerBackoff    = 100 * time.Millisecond
	DefaultBreakerMaxBackoff = 500 * time.Millisecond
	DefaultDenyCacheSize     = 1 << 16
)

// RedisConfig configures a Redis store. Name the server with URL, Addrs,
// or both; the other fields have defaults.
type RedisConfig struct {
	// URL is redis://[[user]:password@]host[:port][/db], or rediss:// for
	// TLS. With Addrs too, it gives only the scheme, credentials and
	// database, and Addrs the servers.
	URL string
	// Addrs are host:port addresses: the seed nodes of a Redis Cluster
	// (with Cluster), the Sentinels (with SentinelMaster), or one server.
	Addrs []string
	// Cluster makes URL's host or Addrs the seed nodes of a Redis Cluster.
	Cluster bool
	// SentinelMaster is the name of the master that the Sentinels at
	// Addrs (or URL's host) watch. Empty for no Sentinel.
	SentinelMaster string
	// Username and Password, when not empty, replace URL's credentials.
	// With Sentinel, they are the master's; the Sentinels are asked
	// without credentials.
	Username, Password string
	// TLS connects with TLS (as rediss:// does) to Addrs.
	TLS bool
	// Timeout bounds one command on an established connection: the time
	// Redis may take to answer, a slow answer included. Waiting for a free
	// connection and dialling one have their own bounds (PoolTimeout,
	// DialTimeout): a healthy Redis under load is not a failure. Default
	// DefaultRedisTimeout (25ms).
	Timeout time.Duration
	// DialTimeout bounds dialling a connection, and Ready. Default
	// DefaultRedisDialTimeout (1s).
	DialTimeout time.Duration
	// PoolTimeout bounds the wait for a free connection when PoolSize are
	// busy. Default DefaultRedisPoolTimeout (1s).
	PoolTimeout time.Duration
	// PoolSize is the number of connections per Redis server. 0 means
	// go-redis's default, 10 per CPU.
	PoolSize int
	// WarmConns is the number of connections per Redis node that Ready
	// dials and the pool keeps idle, so that calls rarely wait for a dial.
	// 0 means DefaultRedisWarmConns (10), at most PoolSize; -1 none.
	WarmConns int
	// BreakerThreshold is the number of consecutive failed calls that
	// opens the circuit breaker. Default 5.
	BreakerThreshold int
	// BreakerBackoff is how long the breaker stays open before it lets a
	// probe through; it doubles after each failed probe up to
	// BreakerMaxBackoff. Defaults 100ms and 500ms: a gateway finds a
	// recovered Redis within about a second.
	BreakerBackoff, BreakerMaxBackoff time.Duration
	// DenyCacheSize is the number of keys whose denial the store
	// remembers, so that it can deny them until the denial's end without
	// asking Redis. 0 means DefaultDenyCacheSize (65536: 7 MB and the keys); -1
	// turns the cache off.
	DenyCacheSize int
	// MaxKeys is the key budget: the most counters of callers (requests
	// with an Overflow key) that Redis keeps for the whole fleet. A new
	// caller's request beyond it is counted against its Overflow key
	// instead; existing counters are unaffected. Callers tagged by
	// CallerTag share it, RedisBuckets equal parts rounded up; the
	// callers of an app's own tag have a budget of MaxKeys of their own.
	// 0 means DefaultRedisMaxKeys (1,000,000); -1 none.
	MaxKeys int
	// OnCircuitChange, if not nil, is called with true when the circuit
	// breaker of a first node opens (no node's was open) and false when
	// the last open one closes.
	OnCircuitChange func(open bool)
	// OnNodeCircuitChange, if not nil, is called with a node's address
	// (see NodeCircuit) when its circuit breaker opens or closes.
	OnNodeCircuitChange func(node string, open bool)
	// Now is the clock of the breaker and the deny cache (decisions use
	// Redis's clock). Default time.Now.
	Now func() time.Time
	// DecisionClock, if not nil, gives the instant the script decides
	// at, instead of Redis's TIME. For tests, which then run on fixed
	// instants (whole microseconds); never set it in production, where
	// only Redis's clock makes gateways with skewed clocks agree.
	DecisionClock func() time.Time
	// FleetID is the ID this gateway registers under in the fleet (see
	// RunFleet). Default: the host name, the process ID and random bits.
	FleetID string
	// FleetHeartbeat is how often RunFleet renews this gateway's
	// membership; a membership lapses after three. Default
	// DefaultFleetHeartbeat (2s).
	FleetHeartbeat time.Duration
	// Leases is the most keys the store holds leases for (see leases):
	// tokens of a window algorithm's limit counted in Redis ahead of the
	// requests, which the gateway admits without a call. 0 means
	// DefaultRedisLeases (65536); -1 turns leases off: every request is a
	// call.
	Leases int
	// MaxBatch is the most script calls one round trip to a node
	// carries: while a call to a node is in flight, the next ones queue
	// and go together when it returns (see batcher). 0 means
	// DefaultRedisBatch (64); 1 sends every call alone, as many at once
	// as the pool has connections.
	MaxBatch int
	// OnBatch, if not nil, is called with the number of script calls of
	// every round trip that carried a batch (see MaxBatch).
	OnBatch func(calls int)
	// Logger receives go-redis's own log lines (failed dials, at debug
	// level: the store's errors and breaker report the same trouble).
	// go-redis logs per process, not per client: the last Redis store
	// created with a Logger gets every client's lines. Nil drops them.
	Logger *slog.Logger
}

// Redis is the distributed Store (the README's "Redis: one limit for a
// fleet of gateways"): the counters live in Redis
// or Redis Cluster and are shared by every gateway that uses it, so that
// limits hold for the fleet as a whole.
//
// One Allow is one script call (EVALSHA, EVAL when Redis lost the
// script): the script reads Redis's clock (TIME), decides every limit of
// the request, and counts the request against all of them only if every
// enforced limit admits it, atomically, with the semantics of Memory.Allow.
// A counter is a Redis hash "gw:{tag}:rest" (see Request.Tag) that
// expires once its state is as good as fresh. Times are whole
// microseconds (Redis's resolution): durations in Params are rounded up
// to them, and Reset and RetryAfter are multiples of them.
//
// A call that fails or whose command takes longer than Timeout returns an
// error; after several in a row to one node, that node's circuit breaker
// fails its calls at once (ErrCircuitOpen) until a probe finds it back,
// while the other nodes of a cluster keep deciding theirs. A key that
// Redis denied until some instant is denied locally until then, without a
// call.
//
// NewRedis does not need Redis to be up: it dials in the background, and
// again whenever Redis comes back; Ready waits until the connections are
// up and the script is loaded. A Redis is safe for concurrent use.
type Redis struct {
	client      redis.UniversalClient
	src         string // the script
	sha         string // its SHA1, for EVALSHA
	timeout     time.Duration
	dialTimeout time.Duration
	// callTimeout bounds a whole call: pool wait, dial and two commands
	// (EVALSHA, and EVAL when the node lost the script).
	callTimeout time.Duration
	warmConns   int
	nodes       nodes
	deny        *denyCache
	now         func() time.Time
	fleetID     string
	heartbeat   time.Duration
	fleetSize   atomic.Int64
	// calls counts script calls sent to Redis, roundTrips the round
	// trips that carried them, decisions the calls of Allow that decided,
	// overflowed the requests Redis counted against their Overflow key
	// (see Stats).
	calls, roundTrips, decisions, overflowed atomic.Int64
	// maxBatch is RedisConfig.MaxBatch; batchers the batcher of each
	// node, by its *breaker, when it is above 1.
	maxBatch int
	batchers sync.Map
	onBatch  func(int)
	// leases are the store's leases; nil when off.
	leases *leases
	// maxKeys is the key budget (RedisConfig.MaxKeys); -1 for none.
	maxKeys int64
	// lastWarm is when rewarm last started, since epoch.
	lastWarm atomic.Int64
	closed   atomic.Bool
	// epoch is now at creation: the deny cache counts from it, on the
	// monotonic clock, so that a step of the wall clock moves no denial.
	epoch time.Time
	// fixedNow, when not nil, gives the instant (µs since the Unix epoch)
	// the script decides at instead of Redis's TIME. Tests only.
	fixedNow func() int64
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Redis store for cfg. It validates cfg but does not
// connect.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	opts, err := redisOptions(&cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("redis timeout %s is negative", cfg.Timeout)
	case cfg.BreakerThreshold < 0:
		return nil, fmt.Errorf("redis breaker threshold %d is negative", cfg.BreakerThreshold)
	case cfg.BreakerBackoff < 0 || cfg.BreakerMaxBackoff < 0:
		return nil, errors.New("redis breaker backoff is negative")
	case cfg.DenyCacheSize < -1:
		return nil, fmt.Errorf("redis deny cache size %d is below -1", cfg.DenyCacheSize)
	case cfg.PoolSize < 0:
		return nil, fmt.Errorf("redis pool size %d is negative", cfg.PoolSize)
	case cfg.DialTimeout < 0 || cfg.PoolTimeout < 0:
		return nil, errors.New("redis dial or pool timeout is negative")
	case cfg.FleetHeartbeat < 0:
		return nil, fmt.Errorf("redis fleet heartbeat %s is negative", cfg.FleetHeartbeat)
	case cfg.WarmConns < -1:
		return nil, fmt.Errorf("redis warm connections %d is below -1", cfg.WarmConns)
	case cfg.Leases < -1:
		return nil, fmt.Errorf("redis leases %d is below -1", cfg.Leases)
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("redis batch size %d is negative", cfg.MaxBatch)
	case cfg.MaxKeys < -1:
		return nil, fmt.Errorf("redis max keys %d is below -1 (-1 for no budget)", cfg.MaxKeys)
	}
	timeout := cmp.Or(cfg.Timeout, DefaultRedisTimeout)
	dialTimeout := cmp.Or(cfg.DialTimeout, DefaultRedisDialTimeout)
	poolTimeout := cmp.Or(cfg.PoolTimeout, DefaultRedisPoolTimeout)
	poolSize := cmp.Or(cfg.PoolSize, 10*runtime.GOMAXPROCS(0))
	warm := min(cmp.Or(cfg.WarmConns, DefaultRedisWarmConns), poolSize)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	src, err := redisScript()
	if err != nil {
		return nil, err
	}

	opts.PoolSize = poolSize
	// One attempt per call: a retry would only add latency that the fail
	// mode avoids, and a retry of a call that timed out may count the
	// request twice. The cluster client would retry a timeout on the same
	// node and then on another up to MaxRedirects times: none either. A
	// MOVED answer (a slot moved: resharding, failover) then fails the call
	// and reloads the slot map for the next.
	opts.MaxRetries = -1
	opts.MaxRedirects = -1
	// Each stage of a call has its own bound: the command's reads and
	// writes Timeout, the wait for a connection PoolTimeout, a dial
	// DialTimeout. The call's context bounds their sum (callTimeout), and
	// go-redis takes the earlier of it and Timeout for a command.
	opts.ContextTimeoutEnabled = true
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	opts.PoolTimeout, opts.DialTimeout = poolTimeout, dialTimeout
	// A refused dial should fail at once, not retry.
	opts.DialerRetries = 1
	if warm > 0 {
		opts.MinIdleConns = warm
	}
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if cfg.Logger != nil {
		redisLog.Store(cfg.Logger)
	}

	r := &Redis{
		client:      redis.NewUniversalClient(opts),
		src:         src,
		sha:         redis.NewScript(src).Hash(),
		timeout:     timeout,
		dialTimeout: dialTimeout,
		callTimeout: poolTimeout + dialTimeout + 3*timeout,
		warmConns:   max(warm, 1),
		now:         now,
		epoch:       now(),
		fleetID:     cmp.Or(cfg.FleetID, newFleetID()),
		heartbeat:   cmp.Or(cfg.FleetHeartbeat, DefaultFleetHeartbeat),
		maxBatch:    cmp.Or(cfg.MaxBatch, DefaultRedisBatch),
		onBatch:     cfg.OnBatch,
		maxKeys:     int64(cmp.Or(cfg.MaxKeys, DefaultRedisMaxKeys)),
	}
	threshold := cmp.Or(cfg.BreakerThreshold, DefaultBreakerThreshold)
	backoff := cmp.Or(cfg.BreakerBackoff, DefaultBreakerBackoff)
	maxBackoff := cmp.Or(cfg.BreakerMaxBackoff, DefaultBreakerMaxBackoff)
	r.nodes.newBreaker = func(node string) *breaker {
		return newBreaker(threshold, backoff, maxBackoff, now, func(open bool) {
			r.circuitChanged(&cfg, node, open)
		})
	}
	switch {
	case opts.IsClusterMode:
	case opts.MasterName != "":
		r.nodes.singleName = "sentinel:" + opts.MasterName
	default:
		r.nodes.singleName = opts.Addrs[0]
	}
	if !opts.IsClusterMode {
		r.nodes.single = r.nodes.newBreaker(r.nodes.singleName)
	}
	if cfg.Leases >= 0 {
		r.leases = newLeases(cmp.Or(cfg.Leases, DefaultRedisLeases))
	}
	if cfg.DenyCacheSize >= 0 {
		r.deny = newDenyCache(cmp.Or(cfg.DenyCacheSize, DefaultDenyCacheSize))
	}
	if c := cfg.DecisionClock; c != nil {
		r.fixedNow = func() int64 { return c().UnixMicro() }
	}
	return r, nil
}

// redisOptions turns cfg's addressing into go-redis options.
func redisOptions(cfg *RedisConfig) (*redis.UniversalOptions, error) {
	if cfg.URL == "" && len(cfg.Addrs) == 0 {
		return nil, errors.New("redis: no server: set a URL or addresses")
	}
	if cfg.Cluster && cfg.SentinelMaster != "" {
		return nil, errors.New("redis: cluster and sentinel are exclusive")
	}
	opts := &redis.UniversalOptions{}
	if cfg.URL != "" {
		u, err := redis.ParseURL(cfg.URL)
		if err != nil {
			// The URL may hold a password: say what is wrong without it.
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opts.Addrs = []string{u.Addr}
		opts.Username, opts.Password, opts.DB, opts.TLSConfig = u.Username, u.Password, u.DB, u.TLSConfig
	}
	if len(cfg.Addrs) > 0 {
		opts.Addrs = nil
		for _, a := range cfg.Addrs {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if err := checkAddr(a); err != nil {
				return nil, fmt.Errorf("redis address %q: %w", a, err)
			}
			opts.Addrs = append(opts.Addrs, a)
		}
		if len(opts.Addrs) == 0 {
			return nil, errors.New("redis: no server: the address list is empty")
		}
	}
	if cfg.Username != "" {
		opts.Username = cfg.Username
	}
	if cfg.Password != "" {
		opts.Password = cfg.Password
	}
	if cfg.TLS && opts.TLSConfig == nil {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case cfg.SentinelMaster != "":
		opts.MasterName = cfg.SentinelMaster
	case cfg.Cluster:
		if opts.DB != 0 {
			return nil, fmt.Errorf("redis: database %d: a cluster has only database 0", opts.DB)
		}
		opts.IsClusterMode = true
	case len(opts.Addrs) > 1:
		return nil, errors.New("redis: several addresses need cluster or a sentinel master")
	}
	return opts, nil
}

// checkAddr checks a host:port address, an IPv6 host in brackets
// ("[::1]:6379"): without them, the host and port of "::1:6379" cannot be
// told apart.
func checkAddr(a string) error {
	_, p, err := net.SplitHostPort(a)
	switch {
	case err != nil && strings.Count(a, ":") > 1:
		return errors.New("want host:port with an IPv6 host in brackets, like [::1]:6379")
	case err != nil:
		return errors.New("want host:port")
	}
	if port, err := strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
		return errors.New("want host:port with a port in 1..65535")
	}
	return nil
}

// circuitChanged reports a node's breaker's change to cfg's callbacks,
// and warms the node up again once it is back. It runs with the node's
// breaker's lock held, so that one node's changes come in order.
func (r *Redis) circuitChanged(cfg *RedisConfig, node string, open bool) {
	if cfg.OnNodeCircuitChange != nil {
		cfg.OnNodeCircuitChange(node, open)
	}
	var first, last bool
	if open {
		first = r.nodes.open.Add(1) == 1
	} else {
		last = r.nodes.open.Add(-1) == 0
		r.rewarm()
	}
	if cfg.OnCircuitChange != nil && (first || last) {
		cfg.OnCircuitChange(open)
	}
}

// Close closes the connections to Redis.
func (r *Redis) Close() error {
	r.closed.Store(true)
	return r.client.Close()
}

// CircuitOpen reports whether the circuit breaker of any node is open: it
// failed repeatedly and its calls fail at once until a probe succeeds.
func (r *Redis) CircuitOpen() bool { return r.nodes.open.Load() > 0 }

// Ping asks Redis whether it is up, within the time to dial and send one
// command. It does not move the circuit breakers.
func (r *Redis) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.dialTimeout+r.timeout)
	defer cancel()
	if err := r.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// argsPerLimit is the number of script arguments per limit, and
// resultsPerLimit the number of values of the reply per limit
// (redis.lua).
const (
	argsPerLimit    = 13
	resultsPerLimit = 6
)

// Allow implements Store, with Memory.Allow's semantics, on Redis's clock:
// now, the gateway's clock, only places the calendar windows that the
// script chooses from (a calendar unit, Params.Calendar), and must be
// within a window of Redis's clock; the deny cache and the breaker use
// RedisConfig.Now.
// It returns ErrCircuitOpen while the breaker is open, and an error when
// Redis fails or does not answer within the timeout; a caller's own
// cancellation is returned as such and does not count as a failure.
//
// The requests must share a Tag (Request.Tag) and have distinct keys. A
// request with an Overflow key is counted against it when its own key is
// new and the key budget of its tag is used up (RedisConfig.MaxKeys).
func (r *Redis) Allow(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	n := len(reqs)
	if len(res) < n {
		return false, fmt.Errorf("limit: %d results for %d requests", len(res), n)
	}
	if n == 0 {
		return true, nil
	}
	keys := make([]string, n)
	var tag0 string
	charges := false
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		if p == nil {
			return false, fmt.Errorf("limit: request for %q has no params", q.Key)
		}
		if err := p.Validate(); err != nil {
			if _, ok := Lookup(p.Algorithm); !ok {
				return false, fmt.Errorf("%w %q", ErrUnknownAlgorithm, p.Algorithm)
			}
			return false, fmt.Errorf("limit: key %q: %w", q.Key, err)
		}
		a, _ := Lookup(p.Algorithm)
		if _, ok := a.(RedisAlgorithm); !ok {
			return false, fmt.Errorf("limit: algorithm %q has no Redis implementation", p.Algorithm)
		}
		tag := redisTag(q)
		if i == 0 {
			tag0 = tag
		} else if tag != tag0 {
			return false, fmt.Errorf("limit: keys %q and %q of one call have different tags %q and %q", reqs[0].Key, q.Key, tag0, tag)
		}
		keys[i] = redisKey(tag, q.Key)
		charges = charges || q.Charge || q.Release
	}

	start := int64(r.now().Sub(r.epoch))
	// Leases first: their tokens are counted already, and a denial
	// another request met meanwhile must not leave them unspent. They
	// need the gateway's clock to run with Redis's: not on a test's fixed
	// decision clock.
	leased := r.leases != nil && r.fixedNow == nil && leasable(reqs)
	var rates []int64
	if leased {
		var buf [maxLeasedLimits]int64
		rates = buf[:0]
		if n > len(buf) {
			rates = make([]int64, 0, n)
		}
		rates = rates[:n]
		ok, claim, wait := r.leases.take(keys, reqs, res, start, rates)
		if wait != nil {
			// Another request is asking for the lease this one needs:
			// its answer comes no later than this one's own would.
			select {
			case <-wait:
			case <-ctx.Done():
				return false, fmt.Errorf("redis: %w", ctx.Err())
			}
			start = int64(r.now().Sub(r.epoch))
			ok, claim, _ = r.leases.take(keys, reqs, res, start, rates)
		}
		if ok {
			r.decisions.Add(1)
			return true, nil
		}
		if claim != nil {
			defer r.leases.release(claim)
		}
	}
	// A charge must reach Redis: it counts whatever the limit says.
	if r.deny != nil && !charges && r.deny.lookup(keys, reqs, start, res) {
		r.decisions.Add(1)
		return false, nil
	}
	args := make([]any, 1, 1+argsPerLimit*n+2*n+3)
	args[0] = ""
	if r.fixedNow != nil {
		args[0] = strconv.FormatInt(r.fixedNow(), 10)
	}
	for i := range reqs {
		q := &reqs[i]
		p := q.Params
		shadow := "0"
		if q.Shadow {
			shadow = "1"
		}
		mode := ""
		switch {
		case q.Charge:
			mode = "c"
		case q.Release:
			mode = "r"
		case q.Hold:
			mode = "h"
		case q.Defer:
			mode = "d"
		}
		args = append(args, p.Algorithm, p.Limit, micros(p.Window), p.Precision, p.Burst,
			micros(p.Warmup), micros(p.Lock), shadow, calendarArg(p, now), q.units(), mode, 0, 0)
	}
	if leased {
		// Each lease is sized by the slowest of the request's keys: a
		// request is admitted from leases only when all of them have a
		// token, so a bigger lease on a busier key (an app total) would
		// be left unspent.
		rate := slices.Min(rates)
		fleet := max(r.fleetSize.Load(), 1)
		for i := range rates {
			o := 1 + argsPerLimit*i
			args[o+11], args[o+12] = rate, fleet
		}
	}
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	b, err := r.breakerFor(cctx, keys[0])
	if err != nil {
		return false, err
	}
	ok, probe := b.allow()
	if !ok {
		r.reloadSlots()
		return false, ErrCircuitOpen
	}
	args = r.budgetArgs(args, reqs, tag0)
	var v []int64
	var shared bool
	if r.maxBatch > 1 {
		v, err, shared = r.batcherFor(b).do(cctx, r, keys, args)
	} else {
		v, err = r.run(cctx, keys, args)
		r.roundTrips.Add(1)
	}
	if err != nil {
		switch {
		case shared:
			// Another call of the same round trip told the breaker.
			b.abandon(probe)
		case ctx.Err() != nil:
			// The caller went away: that says nothing about Redis.
			b.abandon(probe)
			return false, fmt.Errorf("redis: %w", ctx.Err())
		case errors.Is(err, redis.ErrPoolTimeout), isRedirect(err):
			// Every connection is busy (this process is short of
			// connections), or the key's slot has moved: the node is not
			// known to fail.
			b.abandon(probe)
		default:
			b.failure(probe)
		}
		if ctx.Err() == nil && !errors.Is(err, redis.ErrPoolTimeout) {
			r.reloadSlots() // a cluster's master may have moved
		}
		return false, fmt.Errorf("redis: %w", err)
	}
	b.success()
	r.decisions.Add(1)
	if len(v) != 2+resultsPerLimit*n {
		return false, fmt.Errorf("redis: script answered %d values for %d limits", len(v), n)
	}
	r.overflowed.Add(v[len(v)-1])
	for i := range reqs {
		w := v[1+resultsPerLimit*i:]
		res[i] = Result{
			Allowed:    w[0] == 1,
			Limit:      reqs[i].Params.Limit,
			Remaining:  w[1],
			Reset:      time.Duration(w[2]) * time.Microsecond,
			RetryAfter: time.Duration(w[3]) * time.Microsecond,
		}
	}
	allowed := v[0] == 1
	if leased && allowed {
		tokens, spans := make([]int64, n), make([]time.Duration, n)
		for i := range reqs {
			w := v[1+resultsPerLimit*i:]
			tokens[i], spans[i] = w[4], time.Duration(w[5])*time.Microsecond
		}
		r.leases.grant(keys, reqs, res, tokens, spans, start)
	}
	if leased {
		r.leases.unspent(keys, reqs, res, start)
	}
	if !allowed && r.deny != nil {
		r.deny.record(keys, reqs, res, start)
	}
	return allowed, nil
}

// RedisStats are counts of a Redis store's work since it was created.
type RedisStats struct {
	// Decisions is the number of requests the store decided: by Redis,
	// or by its deny cache without a call.
	Decisions int64
	// Calls is the number of script calls sent to Redis, failed ones
	// included (EVALSHA, and EVAL after NOSCRIPT).
	Calls int64
	// RoundTrips is the number of round trips that carried them: fewer
	// than Calls when calls were batched (RedisConfig.MaxBatch).
	RoundTrips int64
	// LeaseGranted is the number of tokens leased beyond the requests
	// that asked, LeaseSpent the requests admitted from leases, and
	// LeaseExpired the tokens lost because their bucket ended first.
	LeaseGranted, LeaseSpent, LeaseExpired int64
	// Overflowed is the number of requests of new callers that Redis
	// counted against their Overflow key because the key budget was used
	// up (RedisConfig.MaxKeys).
	Overflowed int64
}

// Stats returns the store's counts.
func (r *Redis) Stats() RedisStats {
	s := RedisStats{Decisions: r.decisions.Load(), Calls: r.calls.Load(), RoundTrips: r.roundTrips.Load(),
		Overflowed: r.overflowed.Load()}
	if ls := r.leases; ls != nil {
		s.LeaseGranted, s.LeaseSpent, s.LeaseExpired = ls.granted.Load(), ls.spent.Load(), ls.expired.Load()
	}
	return s
}

// run runs the script: EVALSHA, again on another connection if Redis had
// closed the one it took (isClosedConn), and EVAL if the node lost
// the script (a restart, a failover, SCRIPT FLUSH), after which the node
// is warmed up again in the background.
func (r *Redis) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	r.calls.Add(1)
	v, err := r.client.EvalSha(ctx, r.sha, keys, args...).Int64Slice()
	for try := 1; err != nil && isClosedConn(err) && try < closedConnTries && ctx.Err() == nil; try++ {
		r.calls.Add(1)
		v, err = r.client.EvalSha(ctx, r.sha, keys, args...).Int64Slice()
	}
	if err != nil && isNoScript(err) {
		r.rewarm()
		r.calls.Add(1)
		v, err = r.client.Eval(ctx, r.src, keys, args...).Int64Slice()
	}
	return v, err
}

// micros returns d in whole microseconds, rounded up.
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// redisTag returns q's tag: Tag, or Key up to its first "|".
func redisTag(q *Request) string {
	if q.Tag != "" {
		return q.Tag
	}
	if i := strings.IndexByte(q.Key, '|'); i >= 0 {
		return q.Key[:i]
	}
	return q.Key
}

// redisKey returns the Redis key of the counter key with tag:
// "gw:{tag}:rest" when key is tag + "|" + rest (an app's keys:
// "gw:{app-1}:/v1/user"), else "gw:{tag}|key" (a per-IP key:
// "gw:{*|203.0.113.7}|*|/|203.0.113.7"). The separator after the tag tells
// the two forms apart, so distinct keys never share a Redis key. Redis
// Cluster places the key by the tag between the braces.
func redisKey(tag, key string) string {
	if len(key) > len(tag) && key[len(tag)] == '|' && key[:len(tag)] == tag {
		return "gw:{" + tag + "}:" + key[len(tag)+1:]
	}
	return "gw:{" + tag + "}|" + key
}

// redisLog is where go-redis's log lines go (RedisConfig.Logger); nil
// drops them.
var redisLog atomic.Pointer[slog.Logger]

func init() {
	// go-redis's logger is a process-wide variable without a lock: set it
	// once, before any client exists, to one that reads redisLog.
	redis.SetLogger(redisLogger{})
}

// redisLogger sends go-redis's log lines to redisLog at debug level.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
	}
}
