package rls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/stats"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/rlsxds"
	"github.com/ratelimit-gateway/gateway/internal/serving"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// ServerConfig is everything `gateway rls` takes from flags.
type ServerConfig struct {
	// ConfigPath is the configuration file, or a directory of them.
	ConfigPath string
	// MergeDomains lets several files declare one domain.
	MergeDomains bool
	// MaxConfigBytes is the largest file read.
	MaxConfigBytes int64
	// Watch reloads the configuration when the file or directory changes
	// (SIGHUP always does).
	Watch bool
	// Listen is the gRPC address; AdminListen the HTTP admin address.
	Listen, AdminListen string
	// TLSCert and TLSKey, both or neither, serve gRPC over TLS, the pair
	// reloaded when either file changes.
	TLSCert, TLSKey string
	// Headers selects the response headers (Config.Headers).
	Headers ratelimitheader.Mode
	// ShadowMode makes every limit a shadow limit (Config.ShadowMode).
	ShadowMode bool
	// Store holds the store settings, as `serve` takes them.
	Store stores.Config
	// AccessLog, if not empty, is where one JSON line per call goes:
	// "stdout", "stderr" or a file path (AccessLog).
	AccessLog string
	// AccessLogKeys writes descriptor values to the access log as they
	// are; by default it writes their hashes (observe.KeyHasher).
	AccessLogKeys bool
	// KeyHashSecretFile keeps the secret under which the access log and
	// GET /top hash descriptor values, as `serve`'s KeyHashSecretFile:
	// read if it exists, created if not. Empty: AccessLog with ".key"
	// appended when AccessLog is a file, else a random secret of the
	// process (docs/operations.md, "Access log").
	KeyHashSecretFile string
	// TopKeys shows descriptor values at GET /top as they are; by
	// default they are hashed as in the access log.
	TopKeys bool
	// ShutdownTimeout bounds the drain of calls in flight.
	ShutdownTimeout time.Duration
	// Tracing exports OpenTelemetry traces of the calls when
	// Tracing.Enabled (docs/operations.md, "Traces"), descriptor values
	// hashed unless AccessLogKeys.
	Tracing tracing.Config
	// Version is the build's version, for gateway_build_info.
	Version string
	// Logger is the one logger.
	Logger *slog.Logger

	// XDS, when its ServerURL is set, takes the configuration from an
	// xDS server (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW)
	// instead of ConfigPath.
	XDS XDSConfig
	// ForceStart, with XDS, serves before the first configuration
	// arrives (every domain unknown until then, so every request OK); by
	// default the gRPC port opens only once it has
	// (FORCE_START_WITHOUT_INITIAL_CONFIG).
	ForceStart bool
	// HealthyWithConfig makes /healthcheck fail until a configuration
	// with a domain is in force (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithConfig bool
	// DebugListen, if set, serves the admin endpoints there too,
	// /rlconfig among them (envoyproxy/ratelimit's DEBUG_PORT).
	DebugListen string
	// MetricsListen, if set, serves the Prometheus metrics there too, at
	// MetricsPath (default /metrics) (PROMETHEUS_ADDR).
	MetricsListen, MetricsPath string
	// TLSClientCA, with TLSCert, requires the gRPC clients' certificates
	// to verify against this PEM bundle (mutual TLS); TLSClientSAN, if
	// set, requires a client certificate to carry it as a DNS name, URI
	// or IP address.
	TLSClientCA, TLSClientSAN string
	// MaxConnectionAge and MaxConnectionAgeGrace, if positive, close a
	// gRPC connection (GOAWAY) after this age, and at once this much
	// later, so that clients spread over new replicas.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// KeyPrefix, QuotaMode, DynamicMetadata, ReferenceCounting,
	// StopOverLimitCount and ReferenceHeaders are the Service's (Config).
	KeyPrefix                  string
	QuotaMode, DynamicMetadata bool
	ReferenceCounting          bool
	StopOverLimitCount         bool
	ReferenceHeaders           *HeaderNames
}

// XDSConfig locates an xDS server of RateLimitConfig resources.
type XDSConfig struct {
	// ServerURL is its host:port; NodeID the node this service is.
	ServerURL, NodeID string
	// NodeMetadata and Headers are sent as the node's metadata and as
	// gRPC metadata.
	NodeMetadata, Headers map[string]string
	// UseTLS connects with TLS, verifying the server against CAFile (the
	// system's roots when empty) and, if set, its name ServerSAN;
	// CertFile and KeyFile, if set, are the client certificate (mutual
	// TLS).
	UseTLS                               bool
	CertFile, KeyFile, CAFile, ServerSAN string
	// BackoffInitial and BackoffMax bound the waits before reconnecting.
	BackoffInitial, BackoffMax time.Duration
	// MaxMsgSize is the largest response taken; 0 means gRPC's default.
	MaxMsgSize int
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *ServerConfig) Validate() error {
	switch {
	case c.ConfigPath == "" && c.XDS.ServerURL == "":
		return errors.New("--config is empty: name an envoyproxy/ratelimit config file or directory")
	case c.XDS.ServerURL != "" && c.XDS.NodeID == "":
		return errors.New("the xDS node ID is empty (CONFIG_GRPC_XDS_NODE_ID)")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("a client CA for gRPC needs a server certificate (--tls-cert, GRPC_SERVER_TLS_CERT)")
	case c.Listen == "":
		return errors.New("--listen is empty: give an address such as :8081")
	case c.AdminListen == "":
		return errors.New("--admin-listen is empty: give an address such as :9091")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: pass both to serve gRPC over TLS, or neither")
	case c.MaxConfigBytes <= 0:
		return fmt.Errorf("--max-rules-bytes %d is not positive", c.MaxConfigBytes)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout %s is not positive", c.ShutdownTimeout)
	}
	return c.Store.Validate()
}

// Server is a running `gateway rls`: the gRPC service, its admin port and
// the reloading of its configuration.
type Server struct {
	cfg     ServerConfig
	log     *slog.Logger
	svc     *Service
	metrics *observe.RLSMetrics
	top     *Top
	alog    *observe.AccessLog
	tracer  *tracing.Tracer // nil without tracing
	stores  *stores.Stores
	certs   *serving.CertReloader
	grpc    *grpc.Server
	health  *health.Server
	admin   *http.Server
	gl, al  net.Listener
	// extra are the debug and Prometheus servers, when set.
	extra []extraServer
	xds   *rlsxds.Client
	// configured is closed when a configuration is first in force.
	configured chan struct{}
	onceConfig sync.Once

	draining atomic.Bool
	reloadMu sync.Mutex
	state    atomic.Pointer[loadState]
}

// loadState is the outcome of the last loads, for /rules and /readyz.
type loadState struct {
	loadedAt    time.Time
	lastErr     string
	lastErrAt   time.Time
	configInUse *rlsconfig.Config
}

// NewServer loads the configuration, builds the stores and binds the
// listeners. It fails, releasing what it built, when the configuration
// does not load or an address cannot be bound.
func NewServer(cfg ServerConfig) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Store.Logger = cfg.Logger
	s := &Server{cfg: cfg, log: cfg.Logger}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	s.configured = make(chan struct{})
	var c *rlsconfig.Config
	if cfg.XDS.ServerURL == "" {
		if c, err = rlsconfig.Load(cfg.ConfigPath, s.loadOptions()); err != nil {
			return nil, err
		}
	} else {
		if s.xds, err = s.newXDSClient(); err != nil {
			return nil, err
		}
		c = &rlsconfig.Config{Domains: map[string]*rlsconfig.Domain{}}
	}
	if cfg.TLSCert != "" {
		if s.certs, err = serving.NewCertReloader(cfg.TLSCert, cfg.TLSKey, s.log); err != nil {
			return nil, err
		}
	}
	reg := prometheus.NewRegistry()
	var proc *observe.ProcessMetrics
	s.stores, err = stores.New(cfg.Store, func(open bool) {
		// The stores are built before the metrics; Redis calls this
		// only once calls flow, after NewServer.
		if proc != nil {
			proc.SetCircuitOpen(open)
		}
	})
	if err != nil {
		return nil, err
	}
	closers = append(closers, s.stores.Close)
	proc = observe.NewProcessMetrics(observe.ProcessConfig{Registry: reg, Store: string(cfg.Store.Store), Keys: s.stores.Keys, Version: cfg.Version})
	s.stores.Register(reg)
	s.metrics = observe.NewRLSMetrics(reg)
	hasher, err := observe.OpenKeyHasher(cfg.KeyHashSecretFile, cfg.AccessLog, cfg.AccessLog != "" && !cfg.AccessLogKeys, s.log)
	if err != nil {
		return nil, err
	}
	s.top = NewTop(observe.TopConfig{Hasher: hasher, RawKeys: cfg.TopKeys})
	observers := []Observer{s.top}
	var grpcOpts []grpc.ServerOption
	if cfg.Tracing.Enabled {
		tc := cfg.Tracing
		tc.Store = string(cfg.Store.Store)
		tr, err := tracing.New(tc)
		if err != nil {
			return nil, err
		}
		closers = append(closers, tr.Close)
		s.tracer = tr
		tr.Register(reg)
		observers = append(observers, &Traces{RawValues: cfg.AccessLogKeys, Hasher: hasher})
		grpcOpts = append(grpcOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tr.Provider()), otelgrpc.WithPropagators(tr.Propagator()),
			// The health checks are not calls worth a trace.
			otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !strings.HasPrefix(info.FullMethodName, "/grpc.health.") }),
		)))
	}
	if cfg.AccessLog != "" {
		if s.alog, err = observe.OpenAccessLog(cfg.AccessLog); err != nil {
			return nil, fmt.Errorf("--access-log: %w", err)
		}
		s.alog.SetRawKeys(cfg.AccessLogKeys)
		s.alog.SetKeyHasher(hasher)
		closers = append(closers, s.alog.Close)
		observers = append(observers, NewAccessLog(s.alog))
	}
	s.svc, err = New(Config{
		Store: s.stores.Store(), FailMode: s.stores.FailMode(), Local: s.stores.Local(),
		LocalShare: stores.LocalScale(cfg.Store), Headers: cfg.Headers, ShadowMode: cfg.ShadowMode,
		Metrics: s.metrics, Logger: s.log, Observers: observers,
		KeyPrefix: cfg.KeyPrefix, QuotaMode: cfg.QuotaMode, DynamicMetadata: cfg.DynamicMetadata,
		ReferenceCounting: cfg.ReferenceCounting, StopOverLimitCount: cfg.StopOverLimitCount, ReferenceHeaders: cfg.ReferenceHeaders,
	})
	if err != nil {
		return nil, err
	}
	if s.xds == nil {
		s.install(c)
		s.log.Info("rls config loaded", "path", cfg.ConfigPath, "files", len(c.Files), "domains", len(c.Domains), "limits", c.Limits(), "sha256", c.SHA256)
	} else {
		// Nothing is in force until the server sends it.
		s.svc.SetConfig(c)
		s.state.Store(&loadState{configInUse: c})
	}

	tlsConf, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	s.grpc, s.health = NewGRPCServer(s.svc, tlsConf, append(grpcOpts, s.keepalive()...)...)
	if s.gl, err = listen(cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	closers = append(closers, s.gl.Close)
	if s.al, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		return nil, fmt.Errorf("--admin-listen: %w", err)
	}
	closers = append(closers, s.al.Close)
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	adminHandler := s.adminHandler(metricsHandler)
	s.admin = s.httpServer(adminHandler)
	if cfg.DebugListen != "" {
		if err := s.addExtra("debug", cfg.DebugListen, adminHandler); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET "+cmp.Or(cfg.MetricsPath, "/metrics"), metricsHandler)
		if err := s.addExtra("metrics", cfg.MetricsListen, mux); err != nil {
			return nil, err
		}
	}
	for _, x := range s.extra {
		closers = append(closers, x.ln.Close)
	}
	return s, nil
}

func (s *Server) loadOptions() rlsconfig.Options {
	return rlsconfig.Options{MergeDomains: s.cfg.MergeDomains, MaxBytes: s.cfg.MaxConfigBytes}
}

// install puts c in force.
func (s *Server) install(c *rlsconfig.Config) {
	now := time.Now()
	s.svc.SetConfig(c)
	s.onceConfig.Do(func() { close(s.configured) })
	s.metrics.ConfigLoaded(c.Limits(), now)
	st := &loadState{loadedAt: now, configInUse: c}
	s.state.Store(st)
}

// Addr returns the gRPC address; AdminAddr the admin address.
// ExtraAddr returns the address of the debug or metrics listener, nil
// when it is not set.
func (s *Server) ExtraAddr(name string) net.Addr {
	for _, x := range s.extra {
		if x.name == name {
			return x.ln.Addr()
		}
	}
	return nil
}

func (s *Server) Addr() net.Addr      { return s.gl.Addr() }
func (s *Server) AdminAddr() net.Addr { return s.al.Addr() }

// Reload loads the configuration again and puts it in force if it loads;
// a configuration that does not load is refused, logged, and the one in
// force stays. It reports whether the new configuration differs.
func (s *Server) Reload() (changed bool, err error) {
	if s.xds != nil {
		return false, nil // the xDS server pushes its changes
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.state.Load()
	c, err := rlsconfig.Load(s.cfg.ConfigPath, s.loadOptions())
	if err != nil {
		s.metrics.ConfigFailed()
		st := *old
		st.lastErr, st.lastErrAt = err.Error(), time.Now()
		s.state.Store(&st)
		s.log.Error("rls config refused; the config in force stays", "path", s.cfg.ConfigPath, "err", err)
		return false, err
	}
	if c.SHA256 == old.configInUse.SHA256 {
		if old.lastErr != "" {
			// The files are back as they were: no error stands.
			st := *old
			st.lastErr, st.lastErrAt = "", time.Time{}
			s.state.Store(&st)
		}
		return false, nil
	}
	s.install(c)
	s.log.Info("rls config reloaded", "path", s.cfg.ConfigPath, "files", len(c.Files), "domains", len(c.Domains), "limits", c.Limits(), "sha256", c.SHA256)
	return true, nil
}

// Serve serves until ctx is done, then drains: the health service and
// /readyz report not serving, calls in flight finish within
// ShutdownTimeout, and the stores close.
func (s *Server) Serve(ctx context.Context) error {
	defer s.stores.Close()
	if s.alog != nil {
		defer s.alog.Close() // after the drain: no call is in flight
	}
	if s.tracer != nil {
		defer s.tracer.Close() // exports the spans of the last calls
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.certs != nil {
		stop, err := s.certs.Watch(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	if s.cfg.Watch && s.xds == nil {
		if err := s.watchConfig(ctx); err != nil {
			return err
		}
	}
	go s.sweepEvery(ctx, time.Minute)
	s.stores.Start(ctx, s.log)
	if s.xds != nil {
		go s.xds.Run(ctx)
	}
	grpcSrv := serving.GRPC(s.grpc, s.gl)
	if s.xds != nil && !s.cfg.ForceStart {
		// The gRPC port opens once the xDS server has sent a config;
		// the admin port answers meanwhile.
		s.log.Info("waiting for the first config from the xDS server", "server", s.cfg.XDS.ServerURL, "node", s.cfg.XDS.NodeID)
		grpcSrv.After = s.configured
	}
	// The admin, debug and metrics ports stay up through the drain.
	admin := serving.HTTP(s.admin, s.al, false)
	admin.Admin = true
	servers := []serving.Server{grpcSrv, admin}
	for _, x := range s.extra {
		srv := serving.HTTP(x.srv, x.ln, false)
		srv.Admin = true
		servers = append(servers, srv)
	}
	return serving.Run(ctx, serving.Config{
		Servers: servers,
		Started: func() {
			attrs := []any{"grpc", s.gl.Addr().String(), "admin", s.al.Addr().String(), "tls", s.certs != nil, "store", string(s.cfg.Store.Store)}
			for _, x := range s.extra {
				attrs = append(attrs, x.name, x.ln.Addr().String())
			}
			s.log.Info("gateway rls listening", attrs...)
		},
		// The health service and /readyz report not serving while the
		// calls in flight finish.
		Draining: func() {
			s.draining.Store(true)
			s.health.Shutdown()
		},
		ShutdownTimeout: s.cfg.ShutdownTimeout,
		Logger:          s.log,
	})
}

func (s *Server) sweepEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.stores.Sweep(now)
		}
	}
}

// watchConfig reloads the configuration when it changes until ctx is
// done: a file through watch.Watcher (renames and symlink swaps
// included); a directory by watching the directory itself, which sees
// its files written, added, removed and renamed, and the "..data"
// symlink that a Kubernetes ConfigMap volume swaps atomically.
func (s *Server) watchConfig(ctx context.Context) error {
	path := s.cfg.ConfigPath
	reload := func() { s.Reload() } // logs its outcome
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	if !st.IsDir() {
		w, err := watch.New(watch.Config{Path: path, OnChange: reload, Logger: s.log.With("watching", "rls config")})
		if err != nil {
			return err
		}
		go func() {
			w.Run(ctx)
			w.Close()
		}()
		return nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	if err := fw.Add(path); err != nil {
		fw.Close()
		return fmt.Errorf("watching %s: %w", path, err)
	}
	go func() {
		defer fw.Close()
		var timer *time.Timer
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case _, ok := <-fw.Events:
				if !ok {
					return
				}
				// A burst of events (a ConfigMap swap is several) gives
				// one reload after it.
				if timer != nil {
					timer.Stop()
				}
				timer = time.AfterFunc(watch.DefaultDebounce, reload)
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				s.log.Warn("watching the rls config directory", "err", err)
			}
		}
	}()
	return nil
}
