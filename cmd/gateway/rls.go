package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rls"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/stores"
)

func newRLSCmd() *cobra.Command {
	var (
		cfg       = rlsDefaults()
		logFormat = logJSON
		logLevel  levelFlag
		traces    bool
		fromEnv   bool
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
/healthz, /readyz, /healthcheck, /metrics, /rules, /rlconfig, /json and /top
(the heaviest descriptor values, read by gateway top); the gRPC port also
serves the standard gRPC health service and server reflection. --access-log
writes one JSON line per call. SIGTERM or SIGINT drains and exits.

Run with no flags (or --from-env, or as a binary named ratelimit), it reads
envoyproxy/ratelimit's environment instead: RUNTIME_* files or an xDS server
(CONFIG_TYPE=GRPC_XDS_SOTW), REDIS_*, PORT, GRPC_PORT, USE_PROMETHEUS, ...
(docs/rls.md, "Running as envoyproxy/ratelimit"); flags given still win.`,
		Example: `  gateway rls --config examples/rls/config.yaml
  gateway rls --config /etc/ratelimit/config --store redis --redis-url redis://127.0.0.1:6379/0
  REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:6379 RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit gateway rls`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ignored []string
			if fromEnv || cmd.Flags().NFlag() == 0 {
				env, err := rls.FromEnv(os.LookupEnv, rlsDefaults())
				if err != nil {
					return usageError{err}
				}
				if env.Set == 0 && !fromEnv {
					// Neither flags nor envoyproxy/ratelimit's environment.
					return usageError{errors.New("--config is empty: name an envoyproxy/ratelimit config file or directory, or set envoyproxy/ratelimit's environment (docs/rls.md)")}
				}
				c, lf, ll := env.Server, logText, levelFlag{env.LogLevel}
				if env.LogJSON {
					lf = logJSON
				}
				// Flags given keep their priority over the environment.
				fs := pflag.NewFlagSet("rls", pflag.ContinueOnError)
				var fe, tr bool
				bindRLSFlags(fs, &c, &lf, &ll, &fe, &tr)
				var ferr error
				cmd.Flags().Visit(func(f *pflag.Flag) {
					to := fs.Lookup(f.Name)
					if to == nil || ferr != nil {
						return
					}
					if sv, ok := f.Value.(pflag.SliceValue); ok {
						ferr = to.Value.(pflag.SliceValue).Replace(sv.GetSlice())
						return
					}
					ferr = to.Value.Set(f.Value.String())
				})
				if ferr != nil {
					return usageError{ferr}
				}
				cfg, logFormat, logLevel, ignored = c, lf, ll, env.Ignored
			}
			cfg.Logger = newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			for _, n := range ignored {
				cfg.Logger.Warn("environment variable not honoured", "variable", n)
			}
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
	bindRLSFlags(cmd.Flags(), &cfg, &logFormat, &logLevel, &fromEnv, &traces)
	return cmd
}

// rlsDefaults is the configuration of `gateway rls` before its flags.
func rlsDefaults() rls.ServerConfig {
	return rls.ServerConfig{
		Listen: ":8081", AdminListen: "127.0.0.1:9091", Watch: true, MaxConfigBytes: rlsconfig.DefaultMaxBytes,
		Headers: ratelimitheader.None, Store: stores.DefaultConfig(), ShutdownTimeout: 30 * time.Second,
	}
}

// bindRLSFlags defines the flags of `gateway rls` on f, writing to cfg.
func bindRLSFlags(f *pflag.FlagSet, cfg *rls.ServerConfig, logFormat *logFormat, logLevel *levelFlag, fromEnv, traces *bool) {
	f.StringVar(&cfg.ConfigPath, "config", cfg.ConfigPath, "envoyproxy/ratelimit config: a YAML file, or a directory whose files (but hidden ones and editor backups) each hold a domain; a Kubernetes ConfigMap volume works as mounted")
	f.BoolVar(&cfg.MergeDomains, "merge-domains", cfg.MergeDomains, "let several files declare the same domain, merging their descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	f.BoolVar(&cfg.Watch, "watch", cfg.Watch, "reload the config when the file or directory changes (SIGHUP always does)")
	f.Int64Var(&cfg.MaxConfigBytes, "max-rules-bytes", cfg.MaxConfigBytes, "largest config file read; a larger one is refused and the config in force stays")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "gRPC listen address")
	f.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "admin listen address (/healthz, /readyz, /healthcheck, /metrics, /rules, /rlconfig, /json, /top): loopback by default, since /top and /rules show callers and limits; plain HTTP, so keep it on an internal network (from envoyproxy/ratelimit's environment, HOST:PORT, 0.0.0.0:8080)")
	f.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate (chain) file: with --tls-key, gRPC is served over TLS, the pair reloaded when either file changes")
	f.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key file of --tls-cert")
	f.Var(&cfg.Headers, "ratelimit-headers", "response headers for Envoy to add: none (as envoyproxy/ratelimit), both, draft (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*)")
	f.BoolVar(&cfg.ShadowMode, "shadow-mode", cfg.ShadowMode, "decide, count and report every limit but always answer OK (envoyproxy/ratelimit's SHADOW_MODE): try the service on live traffic first")
	f.BoolVar(&cfg.QuotaMode, "quota-mode", cfg.QuotaMode, "make every limit a quota: over it, a descriptor is OK and reported in the dynamic metadata (envoyproxy/ratelimit's QUOTA_MODE)")
	f.BoolVar(&cfg.DynamicMetadata, "dynamic-metadata", cfg.DynamicMetadata, "return the request's descriptors and the quotas it went over in the response's dynamic metadata (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA)")
	f.BoolVar(&cfg.ReferenceCounting, "reference-counting", cfg.ReferenceCounting, "count as envoyproxy/ratelimit does: fixed windows, each descriptor on its own, hits over a limit counted (on when run from its environment)")
	f.BoolVar(fromEnv, "from-env", *fromEnv, "read envoyproxy/ratelimit's environment (REDIS_URL, CONFIG_TYPE, PORT, ...) though flags are given; the flags given win")
	addCounterStoreFlags(f, &cfg.Store)
	f.Lookup("fail-mode").Usage = "redis store: when Redis fails, local (limit in memory with limit × --local-share), open (answer OK) or closed (answer OVER_LIMIT)"
	f.StringVar(&cfg.AccessLog, "access-log", cfg.AccessLog, "write one JSON line per ShouldRateLimit call to stdout, stderr or this file (off when empty)")
	f.BoolVar(&cfg.AccessLogKeys, "access-log-keys", cfg.AccessLogKeys, "write descriptor values to the access log as they are, rather than the first 16 hex digits of their HMAC-SHA256 under the key-hash secret")
	f.StringVar(&cfg.KeyHashSecretFile, "key-hash-secret-file", cfg.KeyHashSecretFile, "file keeping the secret under which the access log and GET /top hash descriptor values; created with a random secret when missing (default: the --access-log file's path + .key when it is a file, else a secret of the process, not kept)")
	f.BoolVar(&cfg.TopKeys, "top-keys", cfg.TopKeys, "show descriptor values at GET /top as they are, rather than hashed as in the access log")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "longest drain of calls in flight on SIGTERM")
	f.BoolVar(traces, "tracing", *traces, tracingUsage+"; envoyproxy/ratelimit's TRACING_ENABLED, TRACING_EXPORTER_PROTOCOL, TRACING_SERVICE_NAME and TRACING_SAMPLING_RATE work too")
	f.Var(logFormat, "log-format", "log format: json or text")
	f.Var(logLevel, "log-level", "log level: debug, info, warn, error")
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
