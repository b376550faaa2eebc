// Package server is the gateway process: it turns a Config into the
// proxy and admin listeners, wires the store, the metrics, the access log
// and the rules reloader around the request path of package proxy, and
// serves until its context ends. Signals are the command's: it calls
// Serve, and Reload on SIGHUP.
//
// It must not hold request-path logic of its own (that is package proxy),
// nor handle signals: cmd/gateway turns the flags into a Config and owns
// the signals.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
	"github.com/ratelimit-gateway/gateway/internal/serving"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// Server is one gateway process: the proxy and admin listeners, bound by
// New, and everything behind them. Create one with New, then call Serve
// once (or Close, to give up before serving).
type Server struct {
	cfg   Config
	log   *slog.Logger
	st    *stores.Stores
	certs *serving.CertReloader // nil without TLS
	jwks  *jwtauth.Keys         // nil without --jwt-jwks
	rules *Reloader
	// pools keeps the rule file's upstream pools across reloads.
	pools *upstream.Registry
	// src is the rule store (etcd, ZooKeeper), nil for a rule file.
	src      source.Source
	handler  *proxy.Handler
	metrics  *observe.Metrics
	proxySrv *http.Server
	adminSrv *http.Server
	pl, al   net.Listener
	upstream string
	// watchMu guards watched, watchCtx and watching: the rule file's watcher
	// starts when Serve does, or at the first reload that brings the
	// file in place of the built-in rules.
	watchMu sync.Mutex
	// watched reports whether the rule file in force is ConfigPath, so
	// that its changes are watched (not the built-in rules).
	watched  bool
	watchCtx context.Context // Serve's; nil before
	watching bool
	// draining is set once Serve stops accepting requests: /readyz then
	// answers 503, so that load balancers send no more.
	draining atomic.Bool
	closers  []func() error // run by Close, last first
}

// New builds the gateway of cfg and binds its listeners. It fails, having
// released whatever it built, on a bad setting, a rule file that does not
// load, or an address it cannot bind.
func New(cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	log := s.log
	trusted, _ := proxy.ParseTrustedProxies(cfg.TrustedProxies) // Validate checked them
	adminToken, err := loadAdminToken(cfg.AdminToken, cfg.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	if cfg.TLSCert != "" {
		if s.certs, err = serving.NewCertReloader(cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return nil, err
		}
	}
	sc := cfg.Config
	sc.SlotTTL, sc.Logger = cfg.UpstreamTimeout, log
	s.st, err = stores.New(sc, func(open bool) {
		// The store is built before the metrics; Redis calls this only
		// once requests flow, after New.
		if s.metrics != nil {
			s.metrics.SetCircuitOpen(open)
		}
	})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.st.Close)

	s.upstream = cfg.Upstream
	if cfg.DemoUpstream {
		demo, err := StartDemoUpstream()
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, demo.Close)
		s.upstream = demo.URL
		log.Info("demo upstream started", "url", s.upstream)
	}
	reg := prometheus.NewRegistry()
	var tr *tracing.Tracer
	if cfg.Tracing.Enabled {
		tc := cfg.Tracing
		tc.Store = string(cfg.Store)
		if tr, err = tracing.New(tc); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, tr.Close)
		tr.Register(reg)
	}
	s.metrics = observe.NewMetrics(observe.MetricsConfig{Registry: reg, Store: string(cfg.Store), Keys: s.st.Keys, Version: cfg.Version, Exemplars: tr != nil})
	s.st.Register(reg)
	hasher, err := observe.OpenKeyHasher(cfg.KeyHashSecretFile, cfg.AccessLog, cfg.AccessLog != "" && !cfg.AccessLogKeys, log)
	if err != nil {
		return nil, err
	}
	top := observe.NewTop(observe.TopConfig{Hasher: hasher, RawKeys: cfg.TopKeys})
	observers := []observe.Observer{s.metrics, top}
	if tr != nil {
		observers = append(observers, &observe.Traces{RawKeys: cfg.AccessLogKeys, Hasher: hasher})
	}
	notifier, err := s.alerts(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	observers = append(observers, notifier)
	if cfg.AccessLog != "" {
		al, err := observe.OpenAccessLog(cfg.AccessLog)
		if err != nil {
			return nil, fmt.Errorf("--access-log: %w", err)
		}
		al.SetRawKeys(cfg.AccessLogKeys)
		al.SetKeyHasher(hasher)
		s.closers = append(s.closers, al.Close)
		observers = append(observers, al)
	}
	forward := proxy.UpstreamConfig{
		Timeout: cfg.UpstreamTimeout, TrustedProxies: trusted, PreserveHost: cfg.PreserveHost,
		Logger: log, Events: s.metrics,
	}
	if tr != nil {
		forward.Propagator = tr.Propagator()
	}
	var rp http.Handler = noRoute
	if s.upstream != "" {
		u, err := proxy.ParseUpstreamURL(s.upstream)
		if err != nil {
			return nil, fmt.Errorf("--upstream: %w", err)
		}
		fw := forward
		fw.URL = u
		if rp, err = proxy.NewUpstream(fw); err != nil {
			return nil, fmt.Errorf("--upstream: %w", err)
		}
	}
	if s.pools, err = upstream.New(upstream.Config{
		ResponseHeaderTimeout: cfg.UpstreamTimeout, Events: s.metrics, Logger: log,
	}); err != nil {
		return nil, err
	}

	jwtv, jwks, err := newJWT(cfg)
	if err != nil {
		return nil, err
	}
	s.jwks = jwks

	var parsed *config.Rules
	if source.IsStore(cfg.ConfigPath) {
		parsed, err = s.openStore(reg)
	} else {
		parsed, err = s.loadInitialRules()
	}
	if err != nil {
		s.metrics.RulesFailed()
		return nil, err
	}
	copts := ruleset.CompileOptions{LocalShare: stores.LocalScale(cfg.Config), NoJWT: jwtv == nil,
		Routes: &ruleset.RouteOptions{Registry: s.pools, Forwarder: proxy.RouteForwarder(forward), NoDefault: s.upstream == ""}}
	rs, err := ruleset.CompileWith(parsed, time.Now(), copts)
	if err != nil {
		return nil, err
	}
	commitUpstreams(s.pools, rs)
	s.metrics.RulesLoaded(len(rs.LimitKeys()), rs.LoadedAt)
	s.handler, err = proxy.NewHandler(proxy.HandlerConfig{
		Rules: rs, Store: s.st.Store(), Upstream: rp, AppHeader: cfg.AppHeader,
		ForwardAppHeader: cfg.ForwardAppHeader, KeyHeader: cfg.KeyHeader,
		RejectUnknown:  cfg.UnknownCallers == RejectUnknown,
		TrustedProxies: trusted, LimitStatus: cfg.LimitStatus, Headers: cfg.RateLimitHeaders, Logger: log,
		BodyTimeout: cfg.ReadHeaderTimeout,
		MaxWaiting:  cfg.MaxWaiting, RetryAfterJitter: cfg.RetryAfterJitter, BodyMemory: cfg.MaxBodyMemory,
		Observers: observers, FailMode: s.st.FailMode(), Local: s.st.Local(),
		Slots: s.st.Slots(), LocalSlots: s.st.LocalSlots(),
		MethodOverride: cfg.MethodOverride, AllowUpgrade: cfg.AllowUpgrade,
		IPv4Prefix: cfg.IPv4Prefix, IPv6Prefix: cfg.IPv6Prefix,
		JWT: jwtv, JWTHeader: cfg.JWTHeader, AppClaim: cfg.AppClaim(),
	})
	if err != nil {
		return nil, err
	}
	reg.MustRegister(s.handler.InFlightCollector())
	load := func() (*config.Rules, error) { return config.LoadMax(cfg.ConfigPath, cfg.MaxRulesBytes) }
	if s.src != nil {
		load = nil // the source's
	}
	s.rules = NewReloader(ReloaderConfig{
		Handler: s.handler,
		Load:    load,
		Source:  s.src,
		Options: copts,
		Forget:  s.st.Forget(),
		OnReload: func(ok bool, rs *ruleset.Set) {
			if ok {
				commitUpstreams(s.pools, rs)
				s.metrics.RulesLoaded(len(rs.LimitKeys()), rs.LoadedAt)
			} else {
				s.metrics.RulesFailed()
			}
			if ok && s.src == nil && rs.Source.Path == cfg.ConfigPath {
				if err := s.watchRules(); err != nil {
					log.Error("cannot watch the rule file; reload it with SIGHUP or POST /rules/reload", "err", err)
				}
			}
		},
		OnUnchanged: s.metrics.RulesUnchanged,
		Logger:      log,
	})
	log.Info("rules loaded", "path", parsed.Path, "sha256", parsed.SHA256, "apps", len(parsed.Apps))

	if s.pl, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	s.closers = append(s.closers, s.pl.Close)
	if s.al, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		return nil, fmt.Errorf("--admin-listen: %w", err)
	}
	s.closers = append(s.closers, s.al.Close)
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	var front http.Handler = s.handler
	if tr != nil {
		front = tr.Handler(s.handler)
	}
	s.proxySrv = &http.Server{
		Handler:           front,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	if s.certs != nil {
		s.proxySrv.TLSConfig = s.certs.TLSConfig("h2", "http/1.1")
	}
	if cfg.H2C {
		s.proxySrv.Protocols = new(http.Protocols)
		s.proxySrv.Protocols.SetHTTP1(true)
		s.proxySrv.Protocols.SetUnencryptedHTTP2(true)
	}
	s.adminSrv = &http.Server{
		Handler: NewAdmin(AdminConfig{
			Rules: s.rules, Store: s.st.Health, Draining: s.draining.Load,
			Metrics: s.metrics.Handler(), Pprof: cfg.Pprof, Token: adminToken,
			Top: top, Upstreams: s.pools, ReadyUpstreams: cfg.ReadyUpstreams, Usage: s.usageConfig(),
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          errLog,
	}
	return s, nil
}

// Addr returns the address the proxy listens on.
func (s *Server) Addr() net.Addr { return s.pl.Addr() }

// AdminAddr returns the address the admin endpoints listen on.
func (s *Server) AdminAddr() net.Addr { return s.al.Addr() }

// Reload reloads the rules and, with TLS, the certificate pair, as the
// rule file's watcher and POST /rules/reload do; each logs its outcome.
// It is what SIGHUP does.
func (s *Server) Reload() error {
	_, err := s.rules.Reload()
	if s.certs != nil {
		err = errors.Join(err, s.certs.Reload())
	}
	return err
}

// Serve serves until ctx is done, then answers /readyz 503 draining,
// keeps accepting requests for DrainDelay, stops accepting, drains
// in-flight requests for at most ShutdownTimeout, and releases everything
// New built.
// With Watch, a change of the rule file reloads the rules; with TLS, a
// change of the certificate pair reloads it.
func (s *Server) Serve(ctx context.Context) error {
	defer s.Close()
	log, cfg := s.log, s.cfg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.certs != nil {
		stop, err := s.certs.Watch(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	if s.jwks != nil {
		stop, err := s.jwks.Watch(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	go s.sweepEvery(ctx, time.Minute)
	go s.pools.Run(ctx)
	// Before serving: Redis may be down, and the gateway then serves by
	// --fail-mode and uses Redis as soon as it answers.
	s.st.Start(ctx, log)
	s.watchMu.Lock()
	s.watchCtx = ctx
	watched := s.watched
	s.watchMu.Unlock()
	if watched {
		if err := s.watchRules(); err != nil {
			return err
		}
	}
	if s.src != nil && cfg.Watch {
		go s.src.Watch(ctx, func() { s.rules.Reload() })
	}

	// The admin port stays up through the drain, answering /readyz 503.
	admin := serving.HTTP(s.adminSrv, s.al, false)
	admin.Admin = true
	return serving.Run(ctx, serving.Config{
		Servers: []serving.Server{serving.HTTP(s.proxySrv, s.pl, s.certs != nil), admin},
		Started: func() {
			log.Info("gateway listening", "proxy", s.pl.Addr().String(), "admin", s.al.Addr().String(), "upstream", s.upstream, "tls", s.certs != nil)
		},
		// Readiness fails first; with a DrainDelay the listener stays
		// open for it, so that a load balancer that polls /readyz takes
		// the gateway out of rotation before connections are refused.
		Draining:        func() { s.draining.Store(true) },
		DrainDelay:      cfg.DrainDelay,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log,
	})
}

// sweepEvery evicts idle counters from the memory store, and the counters
// of removed rules whose grace period is over, every interval until ctx is
// done.
func (s *Server) sweepEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.st.Sweep(now)
			s.rules.Sweep()
		}
	}
}

// watchRules notes that the rule file is in force and starts watching
// it, with Watch, once Serve has started (Serve starts it otherwise) and
// unless it already watches.
func (s *Server) watchRules() error {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.watched = true
	if !s.cfg.Watch || s.watching || s.watchCtx == nil {
		return nil
	}
	log := s.log.With("watching", "rule file")
	settle := s.cfg.WatchSettle
	if settle == 0 {
		settle = -1 // watch.Config: no wait
	}
	w, err := watch.New(watch.Config{
		Path:     s.cfg.ConfigPath,
		OnChange: func() { s.rules.Reload() },
		Settle:   settle,
		Logger:   log,
	})
	if err != nil {
		return err
	}
	s.watching = true
	go func() {
		w.Run(s.watchCtx)
		w.Close()
	}()
	log.Info("watching the rule file", "path", s.cfg.ConfigPath)
	return nil
}

// Close releases everything New built: the listeners, the store's
// connections, the access log and the demo upstream. Serve calls it; call
// it only for a Server that is never served.
func (s *Server) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// openStore opens the rule store of ConfigPath and reads the rules from
// it, or from the rules cache when it is unreachable; reg gets the
// store's gauge.
func (s *Server) openStore(reg prometheus.Registerer) (*config.Rules, error) {
	cfg := s.cfg
	auth := cfg.Etcd
	if cfg.EtcdPasswordFile != "" {
		data, err := safefile.Read(cfg.EtcdPasswordFile, safefile.MaxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("--etcd-password-file: %w", err)
		}
		auth.Password = strings.TrimSpace(string(data))
	}
	src, err := source.New(source.Config{
		Spec: cfg.ConfigPath, MaxBytes: cfg.MaxRulesBytes, CacheFile: cfg.RulesCache,
		Etcd: auth, ZK: cfg.ZK, ProbeInterval: cfg.SourceProbeInterval, Logger: s.log,
	})
	if err != nil {
		return nil, err
	}
	s.src = src
	s.closers = append(s.closers, src.Close)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gateway_rules_source_connected",
		Help: "1 while the rule store (etcd, ZooKeeper) answers, 0 while it does not: the gateway keeps its rules meanwhile.",
	}, func() float64 {
		if src.Status().Connected {
			return 1
		}
		return 0
	}))
	r, _, err := src.Load(context.Background())
	return r, err
}

// loadInitialRules reads the rule file, falling back to the built-in rules
// when the file is missing and none was named.
func (s *Server) loadInitialRules() (*config.Rules, error) {
	cfg := s.cfg
	r, fellBack, err := config.LoadOrFallback(cfg.ConfigPath, cfg.MaxRulesBytes, cfg.FallbackRules)
	if fellBack {
		s.log.Warn("rule file not found; using the rules built into the binary", "path", cfg.ConfigPath)
	}
	s.watched = err == nil && !fellBack
	return r, err
}

// loadAdminToken returns the admin token of --admin-token or
// --admin-token-file, or "" if neither is set. Surrounding white space is
// trimmed from either, as from the Authorization header a client sends: a
// token from a Secret often ends in a newline.
func loadAdminToken(token, file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(token), nil
	}
	data, err := safefile.Read(file, safefile.MaxSecretBytes)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	token = strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("--admin-token-file %s is empty: write the token into it", file)
	}
	return token, nil
}
