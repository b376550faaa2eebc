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
	// Store is the counter store; only "memory" for now. Default "memory".
	Store string
	// MaxKeys caps the memory store's keys. Default 1,000,000.
	MaxKeys int
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
	if c.RateLimitHeaders == "" {
		c.RateLimitHeaders = "both"
	}
	if c.LimitStatus == 0 {
		c.LimitStatus = http.StatusTooManyRequests
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
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
	if cfg.Store != "memory" {
		return fmt.Errorf("--store %q is not supported (supported: memory)", cfg.Store)
	}
	store, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: cfg.MaxKeys})
	if err != nil {
		return fmt.Errorf("--max-keys: %w", err)
	}

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
	metrics := NewMetrics(MetricsConfig{Registry: reg, Store: cfg.Store, Keys: store.Len, Version: cfg.Version})
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
	rs, err := Compile(parsed, time.Now())
	if err != nil {
		return err
	}
	metrics.RulesLoaded(true, rs, rs.LoadedAt)
	h, err := NewHandler(HandlerConfig{
		Rules: rs, Store: store, Upstream: rp, AppHeader: cfg.AppHeader,
		TrustedProxies: trusted, LimitStatus: cfg.LimitStatus, Headers: headers, Logger: log,
		Observers: observers, NeedClientIP: cfg.AccessLog != "",
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
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          errLog,
	}
	adminSrv := &http.Server{
		Handler:           NewAdmin(AdminConfig{Rules: rules, Metrics: metrics.Handler(), Pprof: cfg.Pprof}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          errLog,
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go store.SweepEvery(ctx, time.Minute, time.Now)
	go reloadOnHUP(ctx, rules)
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
	go func() { errc <- proxySrv.Serve(pl) }()
	go func() { errc <- adminSrv.Serve(al) }()
	log.Info("gateway listening", "proxy", pl.Addr().String(), "admin", al.Addr().String(), "upstream", upstream)
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

// reloadOnHUP reloads the rules on every SIGHUP; Reload logs the outcome.
func reloadOnHUP(ctx context.Context, rules *Rules) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			rules.Reload()
		}
	}
}
