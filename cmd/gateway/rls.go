package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/rls"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/server"
)

func newRLSCmd() *cobra.Command {
	var (
		cfg = rls.ServerConfig{
			Listen: ":8081", AdminListen: ":9091", Watch: true, MaxConfigBytes: rlsconfig.DefaultMaxBytes,
			Headers: proxy.HeadersBoth, Store: server.DefaultConfig(), ShutdownTimeout: 30 * time.Second,
		}
		logFormat = logJSON
		logLevel  levelFlag
		traces    bool
	)
	cmd := &cobra.Command{
		Use:   "rls",
		Short: "Serve Envoy's rate-limit service (gRPC) with the gateway's limiter",
		Long: `Serve envoy.service.ratelimit.v3.RateLimitService on --listen for Envoy and the
meshes built on it (Istio, Envoy Gateway, Contour, ...), deciding with the
gateway's limiter and stores, by the descriptors in --config: a file or a
directory of files in envoyproxy/ratelimit's configuration format
(docs/rls.md). A request's descriptors are decided together, all or nothing.

The config reloads when it changes (--watch) and on SIGHUP; a config that
does not load is refused and the one in force stays. --admin-listen serves
/healthz, /readyz, /metrics, /rules and /top (the heaviest descriptor
values, read by gateway top); the gRPC port also serves the standard gRPC
health service. --access-log writes one JSON line per call. SIGTERM or
SIGINT drains and exits.`,
		Example: `  gateway rls --config examples/rls/config.yaml
  gateway rls --config /etc/ratelimit/config --store redis --redis-url redis://127.0.0.1:6379/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			cfg.Version = version
			if err := tracingFromEnv(&cfg.Tracing, "gateway-rls", true, traces); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return runRLS(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", cfg.ConfigPath, "envoyproxy/ratelimit config: a YAML file, or a directory whose files (but hidden ones and editor backups) each hold a domain; a Kubernetes ConfigMap volume works as mounted")
	f.BoolVar(&cfg.MergeDomains, "merge-domains", cfg.MergeDomains, "let several files declare the same domain, merging their descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	f.BoolVar(&cfg.Watch, "watch", cfg.Watch, "reload the config when the file or directory changes (SIGHUP always does)")
	f.Int64Var(&cfg.MaxConfigBytes, "max-rules-bytes", cfg.MaxConfigBytes, "largest config file read; a larger one is refused and the config in force stays")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "gRPC listen address")
	f.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "admin listen address (/healthz, /readyz, /metrics, /rules, /top); plain HTTP, so keep it on an internal network")
	f.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate (chain) file: with --tls-key, gRPC is served over TLS, the pair reloaded when either file changes")
	f.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key file of --tls-cert")
	f.Var(&cfg.Headers, "ratelimit-headers", "response headers for Envoy to add: both, draft (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*), none")
	f.BoolVar(&cfg.ShadowMode, "shadow-mode", cfg.ShadowMode, "decide, count and report every limit but always answer OK (envoyproxy/ratelimit's SHADOW_MODE): try the service on live traffic first")
	addCounterStoreFlags(f, &cfg.Store)
	f.Lookup("fail-mode").Usage = "redis store: when Redis fails, local (limit in memory with limit × --local-share), open (answer OK) or closed (answer OVER_LIMIT)"
	f.StringVar(&cfg.AccessLog, "access-log", cfg.AccessLog, "write one JSON line per ShouldRateLimit call to stdout, stderr or this file (off when empty)")
	f.BoolVar(&cfg.AccessLogKeys, "access-log-keys", cfg.AccessLogKeys, "write descriptor values to the access log as they are, rather than the first 16 hex digits of their sha256")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "longest drain of calls in flight on SIGTERM")
	f.BoolVar(&traces, "tracing", false, tracingUsage+"; envoyproxy/ratelimit's TRACING_ENABLED, TRACING_EXPORTER_PROTOCOL, TRACING_SERVICE_NAME and TRACING_SAMPLING_RATE work too")
	f.Var(&logFormat, "log-format", "log format: json or text")
	f.Var(&logLevel, "log-level", "log level: debug, info, warn, error")
	return cmd
}

// runRLS serves cfg until SIGTERM or SIGINT, then drains; SIGHUP reloads
// the config, and a second SIGTERM or SIGINT exits at once.
func runRLS(cfg rls.ServerConfig) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	srv, err := rls.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := onSignals(sigs, func() { srv.Reload() }, cfg.Logger, cfg.ShutdownTimeout, "")
	defer stop()
	return srv.Serve(ctx)
}
