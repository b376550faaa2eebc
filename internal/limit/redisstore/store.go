package redisstore

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
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of Config.
const (
	DefaultTimeout           = 25 * time.Millisecond
	DefaultDialTimeout       = time.Second
	DefaultPoolTimeout       = time.Second
	DefaultWarmConns         = 10
	DefaultBreakerThreshold  = 5
	DefaultBreakerBackoff    = 100 * time.Millisecond
	DefaultBreakerMaxBackoff = 500 * time.Millisecond
	DefaultDenyCacheSize     = 1 << 16
)

// The layouts of a counter in Redis (Config.Layout).
const (
	LayoutString = "string"
	LayoutHash   = "hash"
)

// Config configures a Redis store. Name the server with URL, Addrs,
// or both; the other fields have defaults.
type Config struct {
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
	// DefaultTimeout (25ms).
	Timeout time.Duration
	// DialTimeout bounds dialling a connection, and Ready. Default
	// DefaultDialTimeout (1s).
	DialTimeout time.Duration
	// MaxTimeout is the longest the wait for Redis's answer to a
	// decision adapts to: from Timeout, as Redis's round trips show it
	// needs (rtt). Default DefaultMaxTimeout (250ms), and never below
	// Timeout: a MaxTimeout of Timeout keeps the wait fixed, as it is in
	// a Redis Cluster.
	MaxTimeout time.Duration
	// PoolTimeout bounds the wait for a free connection when PoolSize are
	// busy. Default DefaultPoolTimeout (1s).
	PoolTimeout time.Duration
	// PoolSize is the number of connections per Redis server. 0 means
	// go-redis's default, 10 per CPU.
	PoolSize int
	// WarmConns is the number of connections per Redis node that Ready
	// dials and the pool keeps idle, so that calls rarely wait for a dial.
	// 0 means DefaultWarmConns (10), at most PoolSize; -1 none.
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
	// MaxKeys is the key budget: a new caller's counter (a request with
	// an Overflow key whose counter does not exist) is created only while
	// the database holds fewer keys, every key of it counted (DBSIZE; on a
	// Cluster, the node's); otherwise the request is counted against its
	// Overflow key. Existing counters are unaffected (budget.go).
	// 0 means DefaultMaxKeys (1,000,000); -1 none.
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
	// decisionClock, if not nil, gives the instant the script decides
	// at, instead of Redis's TIME: tests run on fixed instants (whole
	// microseconds). Only tests set it (redisstoretest.WithDecisionClock):
	// in production only Redis's clock makes gateways with skewed clocks
	// agree.
	decisionClock func() time.Time
	// FleetID is the ID this gateway registers under in the fleet (see
	// RunFleet). Default: the host name, the process ID and random bits.
	FleetID string
	// FleetHeartbeat is how often RunFleet renews this gateway's
	// membership; a membership lapses after three. Default
	// DefaultFleetHeartbeat (2s).
	FleetHeartbeat time.Duration
	// Leases is the most keys the store holds leases for (see tokenLeases):
	// tokens of a window algorithm's limit counted in Redis ahead of the
	// requests, which the gateway admits without a call. 0 means
	// DefaultLeases (65536); -1 turns leases off: every request is a
	// call.
	Leases int
	// Layout is how the store keeps a counter in Redis: "string" (or
	// "") for one string per counter, read and written whole; "hash" for
	// a hash of its fields, as releases before the string layout kept
	// it, which gateways of both releases on one Redis share during a
	// rolling upgrade (docs/fleet.md, "Upgrading"). Either reads the
	// other's counters; each writes its own.
	Layout string
	// MaxBatch is the most script calls one round trip to a node
	// carries: while a call to a node is in flight, the next ones queue
	// and go together when it returns (see batcher). 0 means
	// DefaultBatch (64); 1 sends every call alone, as many at once
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

// Redis is the distributed Store (docs/fleet.md, "Redis: one limit for a
// fleet of gateways"): the counters live in Redis
// or Redis Cluster and are shared by every gateway that uses it, so that
// limits hold for the fleet as a whole.
//
// An Allow that neither its leases nor the deny cache decide is one
// script call (a few, when it waits for leased tokens to come back:
// waitForTokens), each an FCALL of the function library (EVALSHA, or
// EVAL when Redis lost the script, where Redis has no functions), in a round
// trip it may share with other calls to the same node (batch.go): the
// script reads Redis's clock (TIME), decides every limit of the request,
// and counts the request against all of them only if every enforced
// limit admits it, atomically, with the semantics of Memory.Allow. A
// counter is a Redis string "gw:{tag}:rest" (see Request.Tag; a hash of
// the same fields with Config.Layout "hash") that expires once its state
// is as good as fresh. Times are whole
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
// New does not need Redis to be up: it dials in the background, and
// again whenever Redis comes back; Ready waits until the connections are
// up and the script is loaded. A Redis is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	// short is a client on the same servers whose commands time out
	// after Timeout, for the concurrency slots; the decisions' client
	// waits for late answers (lateCall) and bounds its callers itself.
	short redis.UniversalClient
	src   string // the script
	sha   string // its SHA1, for EVALSHA
	fn    *redisFunctions
	wait  waits
	nodes nodes
	// warmConns is how many connections rewarm opens to each node;
	// lastWarm is when it last started, since epoch.
	warmConns int
	lastWarm  atomic.Int64
	batch     batching // batch.go
	deny      *denyCache
	known     *known // what Redis last said of each key (known.go)
	fleet     fleetState
	stats     storeStats
	// leases are the store's leases; nil when off. leaseWait is
	// LeaseWait, or a test's.
	leases    *tokenLeases
	leaseWait time.Duration
	// maxKeys is the key budget (Config.MaxKeys); -1 for none.
	maxKeys int64
	// hashes reports that counters are kept as hashes (Config.Layout).
	hashes bool
	reuse  reuses     // reuse.go
	wb     writeBacks // writeback.go
	closed atomic.Bool
	now    func() time.Time
	// epoch is now at creation: the deny cache counts from it, on the
	// monotonic clock, so that a step of the wall clock moves no denial.
	epoch time.Time
	// fixedNow, when not nil, gives the instant (µs since the Unix epoch)
	// the script decides at instead of Redis's TIME. Tests only.
	fixedNow func() int64
}

// waits are how long the store waits for Redis.
type waits struct {
	timeout time.Duration
	rtt     *rtt // the wait for a decision, from timeout up
	dial    time.Duration
	// call bounds a whole call: pool wait, dial and two commands
	// (EVALSHA, and EVAL when the node lost the script).
	call time.Duration
}

// storeStats are the store's counts (see Stats): calls counts script
// calls sent to Redis, roundTrips the round trips that carried them,
// decisions the calls of Allow that decided, overflowed the requests
// Redis counted against their Overflow key.
type storeStats struct {
	calls, roundTrips, decisions, overflowed atomic.Int64
}

var _ limit.Store = (*Store)(nil)

// New returns a Redis store for cfg. It validates cfg but does not
// connect.
func New(cfg Config) (*Store, error) {
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
	case cfg.Layout != "" && cfg.Layout != LayoutString && cfg.Layout != LayoutHash:
		return nil, fmt.Errorf("redis layout %q: want %q or %q", cfg.Layout, LayoutString, LayoutHash)
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("redis batch size %d is negative", cfg.MaxBatch)
	case cfg.MaxKeys < -1:
		return nil, fmt.Errorf("redis max keys %d is below -1 (-1 for no budget)", cfg.MaxKeys)
	}
	timeout := cmp.Or(cfg.Timeout, DefaultTimeout)
	dialTimeout := cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	poolTimeout := cmp.Or(cfg.PoolTimeout, DefaultPoolTimeout)
	poolSize := cmp.Or(cfg.PoolSize, 10*runtime.GOMAXPROCS(0))
	warm := min(cmp.Or(cfg.WarmConns, DefaultWarmConns), poolSize)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	src, err := redisScript()
	if err != nil {
		return nil, err
	}
	fn, err := newRedisFunctions(src)
	if err != nil {
		return nil, err
	}

	opts.PoolSize = poolSize
	// One attempt per call: a retry would only add latency that the fail
	// mode avoids. The store itself sends a call again only when Redis
	// closed its connection (run), with the call's ID (memo.go), which a
	// retry of go-redis would not know of. The cluster client would retry
	// a timeout on the same node and then on another up to MaxRedirects
	// times: none either. A MOVED answer (a slot moved: resharding,
	// failover) then fails the call and reloads the slot map for the next.
	opts.MaxRetries = -1
	opts.MaxRedirects = -1
	// Each stage of a call has its own bound: the command's reads and
	// writes Timeout, the wait for a connection PoolTimeout, a dial
	// DialTimeout. The call's context bounds their sum (callTimeout), and
	// go-redis takes the earlier of it and Timeout for a command. The
	// decisions' client of one server (or a Sentinel's master) lets a
	// command run to the call's bound: its callers stop waiting after
	// Timeout (batcher.do), and the round trip learns what Redis did with
	// a call whose caller decided locally meanwhile (lateCall). A
	// cluster client's own commands (the slot map, command info) would
	// then wait as long on a hung node, holding up the calls to the
	// others: there every command times out after Timeout.
	maxTimeout := max(cmp.Or(cfg.MaxTimeout, DefaultMaxTimeout), timeout)
	if opts.IsClusterMode {
		// Every command of a cluster's client ends after Timeout (below):
		// the wait cannot adapt past it.
		maxTimeout = timeout
	}
	callTimeout := poolTimeout + dialTimeout + 3*maxTimeout
	opts.ContextTimeoutEnabled = true
	opts.PoolTimeout, opts.DialTimeout = poolTimeout, dialTimeout
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	// A refused dial should fail at once, not retry.
	opts.DialerRetries = 1
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// The short client (the concurrency slots, r.short) has every option
	// above; the decisions' client differs from it only below.
	shortOpts := *opts
	if !opts.IsClusterMode {
		opts.ReadTimeout, opts.WriteTimeout = callTimeout, callTimeout
	}
	if warm > 0 {
		opts.MinIdleConns = warm
	}
	if cfg.Logger != nil {
		redisLog.Store(cfg.Logger)
	}

	r := &Store{
		client: redis.NewUniversalClient(opts),

		src:       src,
		sha:       redis.NewScript(src).Hash(),
		fn:        fn,
		wait:      waits{timeout: timeout, rtt: newRTT(timeout, maxTimeout), dial: dialTimeout, call: callTimeout},
		warmConns: max(warm, 1),
		now:       now,
		epoch:     now(),
		fleet:     fleetState{id: cmp.Or(cfg.FleetID, newFleetID()), heartbeat: cmp.Or(cfg.FleetHeartbeat, DefaultFleetHeartbeat)},
		batch:     batching{max: cmp.Or(cfg.MaxBatch, DefaultBatch), onBatch: cfg.OnBatch},
		maxKeys:   int64(cmp.Or(cfg.MaxKeys, DefaultMaxKeys)),
		hashes:    cfg.Layout == LayoutHash,
	}
	threshold := cmp.Or(cfg.BreakerThreshold, DefaultBreakerThreshold)
	backoff := cmp.Or(cfg.BreakerBackoff, DefaultBreakerBackoff)
	r.wb.retry = backoff
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
	r.short = r.client
	if !opts.IsClusterMode {
		r.short = redis.NewUniversalClient(&shortOpts)
		addHandshakeHook(r.short)
	}
	addHandshakeHook(r.client)
	if cfg.Leases >= 0 {
		r.leases = newTokenLeases(cmp.Or(cfg.Leases, DefaultLeases), r.clock)
		r.leases.giveBack = r.giveBack
		r.leaseWait = LeaseWait
	}
	r.known = newKnown(knownSize)
	if cfg.DenyCacheSize >= 0 {
		r.deny = newDenyCache(cmp.Or(cfg.DenyCacheSize, DefaultDenyCacheSize))
	}
	if c := cfg.decisionClock; c != nil {
		r.fixedNow = func() int64 { return c().UnixMicro() }
	}
	return r, nil
}

// redisOptions turns cfg's addressing into go-redis options.
func redisOptions(cfg *Config) (*redis.UniversalOptions, error) {
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

// Close gives the tokens of its leases back to Redis and closes the
// connections.
func (r *Store) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	if ls := r.leases; ls != nil {
		if back := ls.close(); len(back) > 0 {
			r.giveBack(back)
		}
		ls.bg.Wait()
	}
	r.awaitLate(time.Now().Add(r.wait.call))
	r.wb.mu.Lock()
	r.wb.closed = true // no flush starts after this (flushWriteBacks)
	r.wb.mu.Unlock()
	r.wb.group.Wait()
	r.lastFlush()
	err := r.client.Close()
	if r.short != r.client {
		err = errors.Join(err, r.short.Close())
	}
	return err
}

// CircuitOpen reports whether the circuit breaker of any node is open: it
// failed repeatedly and its calls fail at once until a probe succeeds.
func (r *Store) CircuitOpen() bool { return r.nodes.open.Load() > 0 }

// Stats are counts of a Redis store's work since it was created.
type Stats struct {
	// Decisions is the number of requests the store decided: by Redis,
	// or by its deny cache without a call.
	Decisions int64
	// Calls is the number of script calls sent to Redis, failed ones
	// included (EVALSHA, and EVAL after NOSCRIPT).
	Calls int64
	// RoundTrips is the number of round trips that carried them: fewer
	// than Calls when calls were batched (Config.MaxBatch).
	RoundTrips int64
	// LeaseGranted is the number of tokens leased beyond the requests
	// that asked, LeaseSpent the requests admitted from leases,
	// LeaseExpired the tokens lost because their bucket ended first, and
	// LeaseReturned those given back to Redis unspent.
	LeaseGranted, LeaseSpent, LeaseExpired, LeaseReturned int64
	// WrittenBack is the number of write-backs counted in Redis after a
	// call it did not answer in time: local admissions
	// (AdmittedLocally), and the charges and releases of calls that
	// never reached it (late.go); and
	// WriteBacksDropped those dropped because their bucket had ended,
	// or, for a call whose fate is unknown, because Redis may have
	// forgotten its memo or it had none of its own; and the calls whose
	// charges are not sent again, their fate unknown (late.go).
	WrittenBack, WriteBacksDropped int64
	// Overflowed is the number of requests of new callers that Redis
	// counted against their Overflow key because the key budget was used
	// up (Config.MaxKeys).
	Overflowed int64
}

// Stats returns the store's counts.
func (r *Store) Stats() Stats {
	s := Stats{Decisions: r.stats.decisions.Load(), Calls: r.stats.calls.Load(), RoundTrips: r.stats.roundTrips.Load(),
		Overflowed: r.stats.overflowed.Load(), WrittenBack: r.wb.written.Load(), WriteBacksDropped: r.wb.dropped.Load()}
	if ls := r.leases; ls != nil {
		s.LeaseGranted, s.LeaseSpent, s.LeaseExpired = ls.granted.Load(), ls.spent.Load(), ls.expired.Load()
		s.LeaseReturned = ls.returned.Load()
	}
	return s
}

// run runs the script: FCALL or EVALSHA (scriptCmd), again on another
// connection if Redis had closed the one it took (isClosedConn), and EVAL
// if the node lost the script or the library (a restart, a failover,
// SCRIPT FLUSH, FUNCTION FLUSH), after which the node is warmed up again
// in the background.
func (r *Store) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	return r.runOnce(ctx, keys, args, memo{})
}

// runOnce is run for a call with m: every send after the first is marked
// as sent again, and Redis runs the call at most once (memo.go).
func (r *Store) runOnce(ctx context.Context, keys []string, args []any, m memo) ([]int64, error) {
	k, a := m.with(keys, args)
	r.stats.calls.Add(1)
	v, err := r.scriptCmd(ctx, r.client, k, a).Int64Slice()
	for try := 1; err != nil && isClosedConn(err) && try < closedConnTries && ctx.Err() == nil; try++ {
		m.again = true
		k, a = m.with(keys, args)
		r.stats.calls.Add(1)
		v, err = r.scriptCmd(ctx, r.client, k, a).Int64Slice()
		err = resent(err)
	}
	if err != nil && isNoScript(err) {
		r.fn.lost(err)
		r.rewarm()
		r.stats.calls.Add(1)
		v, err = r.client.Eval(ctx, r.src, k, a...).Int64Slice()
		if m.again {
			err = resent(err) // a send before it may have run
		}
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
