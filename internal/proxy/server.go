package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Config is everything `gateway serve` takes from flags and environment.
type Config struct {
	// ConfigPath is the rule file. Default "configs/ratelimiter-rule.yaml".
	ConfigPath string
	// FallbackRules, if not nil, are used (with a warning) when ConfigPath
	// does not exist: the example rules built into the binary, so that
	// the gateway starts anywhere. Set only when the operator did not
	// name a file.
	FallbackRules []byte
	// Listen is the proxy's address. Default ":8080".
	Listen string
	// AdminListen is the admin address. Default ":9090".
	AdminListen string
	// Upstream is the base URL admitted requests go to. Required unless
	// DemoUpstream.
	Upstream string
	// DemoUpstream starts a small built-in upstream on loopback and
	// forwards to it, so that the gateway works with nothing else running.
	DemoUpstream bool
	// AppHeader carries the caller's app ID. Default "X-App-Id".
	AppHeader string
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string
	// ForwardAppHeader passes the app header on to the upstream; by
	// default it is removed.
	ForwardAppHeader bool
	// KeyHeader carries the API key of callers whose app has keys.
	// Default "X-Api-Key".
	KeyHeader string
	// UnknownCallers is "allow" (the "*" section limits them) or
	// "reject" (403). Default "allow".
	UnknownCallers string
	// Store is the counter store: "memory" or "redis". Default "memory".
	Store string
	// MaxKeys caps the memory store's keys (and, under FailMode local,
	// the in-memory fallback's). Default 1,000,000.
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
	// RedisTimeout bounds every Redis call. Default 25ms.
	RedisTimeout time.Duration
	// FailMode is what the redis store's failures do to a request:
	// "open", "closed" or "local". Default "open".
	FailMode string
	// LocalShare scales each limit under FailMode local, in (0, 1].
	// Default DefaultLocalShare (0.1).
	LocalShare float64
	// UpstreamTimeout bounds the wait for the upstream's response
	// headers. Default 30s.
	UpstreamTimeout time.Duration
	// LimitStatus is the status of a limited response. Default 429.
	LimitStatus int
	// RateLimitHeaders is both, draft, legacy or none. Default both.
	RateLimitHeaders string
	// Watch reloads the rules when the rule file changes on disk.
	Watch bool
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	// Default 30s.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds the reading of a request's line and
	// headers (and the TLS handshake) on the proxy port, so that clients
	// that send them slowly or never (slowloris) cannot hold connections
	// open. Default 10s. There is deliberately no timeout on the whole
	// request or response: it would cut off long uploads and streamed
	// responses.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection on the proxy
	// port waits for its next request. Default 120s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the size of a request's line and headers on the
	// proxy port; a larger request gets 431. Default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// TLSCert and TLSKey, both or neither, are PEM files of the proxy
	// port's certificate (chain) and key: with them the proxy serves
	// HTTPS with HTTP/2, and reloads the pair when either file changes or
	// on SIGHUP. The admin port stays plain HTTP.
	TLSCert, TLSKey string
	// AdminToken is the bearer token that POST /rules/reload requires;
	// without one that endpoint is disabled (403).
	AdminToken string
	// AdminTokenFile, exclusive with AdminToken, is a file whose contents,
	// trimmed of white space, are the admin token.
	AdminTokenFile string
	// Logger is the one logger. Default slog.Default().
	Logger *slog.Logger
	// AccessLog, if not empty, is where one JSON line per request goes:
	// "stdout", "stderr" or a file path.
	AccessLog string
	// Pprof serves the Go profiler on the admin port at /debug/pprof/.
	Pprof bool
	// Version is the build's version, for gateway_build_info.
	Version string
	// Ready, if not nil, is called with the bound proxy and admin
	// addresses once both listen (tests use it with ":0").
	Ready func(proxyAddr, adminAddr net.Addr)
}

func (c *Config) setDefaults() {
	if c.ConfigPath == "" {
		c.ConfigPath = "configs/ratelimiter-rule.yaml"
	}
	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if c.AdminListen == "" {
		c.AdminListen = ":9090"
	}
	if c.Store == "" {
		c.Store = "memory"
	}
	if c.FailMode == "" {
		c.FailMode = "open"
	}
	if c.RedisTimeout == 0 {
		c.RedisTimeout = limit.DefaultRedisTimeout
	}
	if c.LocalShare == 0 {
		c.LocalShare = DefaultLocalShare
	}
	if c.RateLimitHeaders == "" {
		c.RateLimitHeaders = "both"
	}
	if c.LimitStatus == 0 {
		c.LimitStatus = http.StatusTooManyRequests
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Run serves until ctx is cancelled, then drains in-flight requests. SIGHUP,
// POST /rules/reload on the admin port and (with Watch) a change of the
// rule file reload the rules.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	log := cfg.Logger

	headers, ok := ParseHeaderMode(cfg.RateLimitHeaders)
	if !ok {
		return fmt.Errorf("--ratelimit-headers %q is not one of both, draft, legacy, none", cfg.RateLimitHeaders)
	}
	if cfg.LimitStatus < 400 || cfg.LimitStatus > 599 {
		return fmt.Errorf("--limit-status %d is not a 4xx or 5xx status", cfg.LimitStatus)
	}
	trusted, err := ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	var rejectUnknown bool
	switch cfg.UnknownCallers {
	case "", "allow":
	case "reject":
		rejectUnknown = true
	default:
		return fmt.Errorf("--unknown-callers %q is not one of allow, reject", cfg.UnknownCallers)
	}
	failMode, ok := ParseFailMode(cfg.FailMode)
	if !ok {
		return fmt.Errorf("--fail-mode %q is not one of open, closed, local", cfg.FailMode)
	}
	if !(cfg.LocalShare > 0 && cfg.LocalShare <= 1) {
		return fmt.Errorf("--local-share %v is outside (0, 1]", cfg.LocalShare)
	}
	if err := CheckServerLimits(cfg); err != nil {
		return err
	}
	adminToken, err := loadAdminToken(cfg.AdminToken, cfg.AdminTokenFile)
	if err != nil {
		return err
	}
	if err := checkTLSFlags(cfg.TLSCert, cfg.TLSKey); err != nil {
		return err
	}
	var certs *certReloader
	if cfg.TLSCert != "" {
		if certs, err = newCertReloader(cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return err
		}
		stop, err := certs.Watch(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	// metrics is set below, before anything can call the store.
	var metrics *Metrics
	st, err := newStore(cfg, failMode, func(open bool) {
		metrics.SetCircuitOpen(open)
		if open {
			log.Warn("redis circuit breaker open: deciding by --fail-mode until a probe finds Redis back", "fail_mode", cfg.FailMode)
		} else {
			log.Info("redis circuit breaker closed: Redis answers again")
		}
	})
	if err != nil {
		return err
	}
	defer st.close()

	upstream := cfg.Upstream
	if cfg.DemoUpstream {
		if upstream != "" {
			return errors.New("--demo-upstream and --upstream are exclusive")
		}
		demo, err := StartDemoUpstream()
		if err != nil {
			return err
		}
		defer demo.Close()
		upstream = demo.URL
		log.Info("demo upstream started", "url", upstream)
	}
	if upstream == "" {
		return errors.New("no upstream: pass --upstream URL (or --demo-upstream to try the gateway)")
	}
	u, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}
	reg := prometheus.NewRegistry()
	metrics = NewMetrics(MetricsConfig{Registry: reg, Store: cfg.Store, Keys: st.keys, Version: cfg.Version})
	observers := []Observer{metrics}
	if cfg.AccessLog != "" {
		al, err := OpenAccessLog(cfg.AccessLog)
		if err != nil {
			return fmt.Errorf("--access-log: %w", err)
		}
		defer al.Close()
		observers = append(observers, al)
	}

	rp, err := NewUpstream(UpstreamConfig{URL: u, Timeout: cfg.UpstreamTimeout, Logger: log, Events: metrics})
	if err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}

	parsed, err := loadInitialRules(cfg, log)
	if err != nil {
		metrics.RulesLoaded(false, nil, time.Time{})
		return err
	}
	copts := CompileOptions{LocalShare: cfg.LocalShare}
	rs, err := CompileWith(parsed, time.Now(), copts)
	if err != nil {
		return err
	}
	metrics.RulesLoaded(true, rs, rs.LoadedAt)
	h, err := NewHandler(HandlerConfig{
		Rules: rs, Store: st.store, Upstream: rp, AppHeader: cfg.AppHeader,
		ForwardAppHeader: cfg.ForwardAppHeader, KeyHeader: cfg.KeyHeader, RejectUnknown: rejectUnknown,
		TrustedProxies: trusted, LimitStatus: cfg.LimitStatus, Headers: headers, Logger: log,
		Observers: observers, NeedClientIP: cfg.AccessLog != "",
		FailMode: st.failMode, Local: st.local,
	})
	if err != nil {
		return err
	}
	rules := NewRules(h, func() (*config.Rules, error) { return config.Load(cfg.ConfigPath) }, nil, log)
	rules.OnReload(func(ok bool, rs *RuleSet) { metrics.RulesLoaded(ok, rs, rs.LoadedAt) })
	log.Info("rules loaded", "path", parsed.Path, "sha256", parsed.SHA256, "apps", len(parsed.Apps))

	pl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	al, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		pl.Close()
		return fmt.Errorf("--admin-listen: %w", err)
	}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	proxySrv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	if certs != nil {
		proxySrv.TLSConfig = serverTLSConfig(certs)
	}
	adminSrv := &http.Server{
		Handler:           NewAdmin(AdminConfig{Rules: rules, Store: st.health, Metrics: metrics.Handler(), Pprof: cfg.Pprof, Token: adminToken}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          errLog,
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if st.mem != nil {
		go st.mem.SweepEvery(ctx, time.Minute, time.Now)
	}
	if st.redis != nil {
		// Redis may be down: the gateway serves by --fail-mode meanwhile
		// and uses Redis as soon as it answers.
		if err := st.redis.Ping(ctx); err != nil {
			log.Warn("redis unreachable at start; serving by --fail-mode until it answers", "err", err, "fail_mode", cfg.FailMode)
		}
	}
	hupReloads := []func(){func() { rules.Reload() }}
	if certs != nil {
		hupReloads = append(hupReloads, func() { certs.Reload() })
	}
	reloadOnHUP(ctx, hupReloads...)
	if cfg.Watch && parsed.Path == cfg.ConfigPath {
		w, err := config.NewWatcher(config.WatchConfig{
			Path:     cfg.ConfigPath,
			OnChange: func() { rules.Reload() },
			Logger:   log,
		})
		if err != nil {
			return err
		}
		defer w.Close()
		go w.Run(ctx)
	}

	errc := make(chan error, 2)
	go func() {
		if certs != nil {
			// The certificate comes from TLSConfig.GetCertificate.
			errc <- proxySrv.ServeTLS(pl, "", "")
			return
		}
		errc <- proxySrv.Serve(pl)
	}()
	go func() { errc <- adminSrv.Serve(al) }()
	log.Info("gateway listening", "proxy", pl.Addr().String(), "admin", al.Addr().String(), "upstream", upstream, "tls", certs != nil)
	if cfg.Ready != nil {
		cfg.Ready(pl.Addr(), al.Addr())
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		proxySrv.Close()
		adminSrv.Close()
		return fmt.Errorf("serving: %w", err)
	}
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	perr := proxySrv.Shutdown(sctx)
	aerr := adminSrv.Shutdown(sctx)
	if err := errors.Join(perr, aerr); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

// stores are the stores Run built from Config.
type stores struct {
	store    limit.Store   // what the handler asks
	mem      *limit.Memory // the memory store, or the local fallback; nil if none
	redis    *limit.Redis  // the redis store, if it is the one
	local    limit.Store   // the handler's Local store (FailLocal only)
	failMode FailMode
	name     string
}

// newStore builds the store of cfg.Store. onCircuit is called when the
// redis store's circuit breaker opens or closes.
func newStore(cfg Config, failMode FailMode, onCircuit func(open bool)) (*stores, error) {
	st := &stores{name: cfg.Store}
	switch cfg.Store {
	case "memory":
		mem, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
		if err != nil {
			return nil, fmt.Errorf("--max-keys: %w", err)
		}
		st.store, st.mem = mem, mem
	case "redis":
		red, err := limit.NewRedis(limit.RedisConfig{
			URL: cfg.RedisURL, Addrs: cfg.RedisAddrs, Cluster: cfg.RedisCluster,
			SentinelMaster: cfg.RedisSentinelMaster, Username: cfg.RedisUsername,
			Password: cfg.RedisPassword, TLS: cfg.RedisTLS, Timeout: cfg.RedisTimeout,
			OnCircuitChange: onCircuit, Logger: cfg.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("--store redis: %w", err)
		}
		st.store, st.redis, st.failMode = red, red, failMode
		if failMode == FailLocal {
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

// keys returns the number of counters the store keeps in this process:
// the memory store's; Redis's are in Redis.
func (st *stores) keys() int {
	if st.redis == nil && st.mem != nil {
		return st.mem.Len()
	}
	return 0
}

// health reports on the store for /readyz.
func (st *stores) health(ctx context.Context) StoreHealth {
	if st.redis == nil {
		return StoreHealth{Store: st.name, Reachable: true, Serving: true}
	}
	h := StoreHealth{Store: st.name, Circuit: "closed", FailMode: st.failMode.String()}
	if st.redis.CircuitOpen() {
		h.Circuit = "open"
	}
	if err := st.redis.Ping(ctx); err != nil {
		h.Error = err.Error()
	} else {
		h.Reachable = true
	}
	h.Serving = h.Reachable || st.failMode != FailClosed
	return h
}

func (st *stores) close() {
	if st.redis != nil {
		st.redis.Close()
	}
}

// loadInitialRules reads the rule file, falling back to the built-in rules
// when the file is missing and none was named. Only the first load falls
// back: a rule file deleted later must not bring the examples into force.
func loadInitialRules(cfg Config, log *slog.Logger) (*config.Rules, error) {
	r, err := config.Load(cfg.ConfigPath)
	if err != nil && cfg.FallbackRules != nil && errors.Is(err, os.ErrNotExist) {
		log.Warn("rule file not found; using the example rules built into the binary", "path", cfg.ConfigPath)
		return config.Parse("built-in:ratelimiter-rule.yaml", cfg.FallbackRules)
	}
	return r, err
}

// reloadOnHUP calls every reload on each SIGHUP until ctx is done; the
// reloads log their outcomes. It subscribes to SIGHUP before it returns,
// so that a SIGHUP sent once the gateway listens is never lost (nor, by
// default, fatal).
func reloadOnHUP(ctx context.Context, reloads ...func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				for _, reload := range reloads {
					reload()
				}
			}
		}
	}()
}

// DefaultMaxHeaderBytes is the default Config.MaxHeaderBytes: 64 KiB, far
// above what real clients send (browsers and proxies cap a request's
// headers at 8–16 KiB, cookies included) and a sixteenth of net/http's
// 1 MiB, so that each connection still reading headers can pin only that
// much memory.
const DefaultMaxHeaderBytes = 64 << 10

// CheckServerLimits reports the first of cfg's ReadHeaderTimeout,
// IdleTimeout and MaxHeaderBytes that is not positive. Run checks them
// after filling in the defaults for zero values; the command line checks
// the flags as given, where zero is refused too: to net/http it would mean
// no limit, and silently serving the default instead would surprise.
func CheckServerLimits(cfg Config) error {
	switch {
	case cfg.ReadHeaderTimeout <= 0:
		return fmt.Errorf("--read-header-timeout %s is not positive: it bounds how long a client may take to send its headers", cfg.ReadHeaderTimeout)
	case cfg.IdleTimeout <= 0:
		return fmt.Errorf("--idle-timeout %s is not positive: it bounds how long a keep-alive connection may sit idle", cfg.IdleTimeout)
	case cfg.MaxHeaderBytes <= 0:
		return fmt.Errorf("--max-header-bytes %d is not positive: it caps the size of a request's headers", cfg.MaxHeaderBytes)
	}
	return nil
}

// loadAdminToken returns the admin token of --admin-token or
// --admin-token-file, or "" if neither is set. Surrounding white space is
// trimmed from either, as from the Authorization header a client sends: a
// token from a Secret often ends in a newline.
func loadAdminToken(token, file string) (string, error) {
	if file == "" {
		if token != "" && strings.TrimSpace(token) == "" {
			return "", errors.New("--admin-token is only white space: set a token, or none to disable POST /rules/reload")
		}
		return strings.TrimSpace(token), nil
	}
	if token != "" {
		return "", errors.New("--admin-token and --admin-token-file are exclusive: pass one")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	token = strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--admin-token-file %s is empty: write the token into it", file)
	}
	return token, nil
}
