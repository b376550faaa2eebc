package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/configs"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/server"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newServeCmd() *cobra.Command {
	var (
		cfg       = server.DefaultConfig()
		logFormat = logJSON
		logLevel  levelFlag
		zkFromEnv func()
		traces    bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway: proxy requests from --listen to --upstream, limited by the
rules in --config, with /healthz, /readyz and /rules on --admin-listen.

The rules reload when the file changes (--watch), on SIGHUP and on
POST /rules/reload (which needs --admin-token); a file that fails validation
never replaces good rules.

With --store redis, every gateway that uses the same Redis (or Redis
Cluster) shares its counters, so that limits hold for the fleet; when Redis
fails or is slower than --redis-timeout, --fail-mode decides.
SIGTERM or SIGINT drains in-flight requests and exits.`,
		Example: `  gateway serve --demo-upstream
  gateway serve --config /etc/gateway/ratelimiter-rule.yaml --upstream http://127.0.0.1:8081
  GATEWAY_REDIS_PASSWORD=secret gateway serve --upstream http://127.0.0.1:8081 --store redis --redis-url rediss://gateway@redis.internal:6380/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			cfg.Version = version
			zkFromEnv()
			if err := tracingFromEnv(&cfg.Tracing, "gateway", false, traces); err != nil {
				return err
			}
			if !cmd.Flags().Changed("config") {
				cfg.FallbackRules = configs.ExampleRules
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return serve(cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ConfigPath, "config", cfg.ConfigPath, "rule file (YAML, or JSON or XML by extension), or etcd://host:2379[,host:2379]/key or zk://host:2181[,host:2181]/path for rules in a store (etcds://, zks:// over TLS); if the default file is missing, the built-in example rules are used")
	f.StringVar(&cfg.RulesCache, "rules-cache", cfg.RulesCache, "with rules in a store: file written with every good rules value, from which the gateway starts (with a warning) when the store is unreachable at start")
	zkFromEnv = addStoreFlags(f, &cfg.Etcd, &cfg.EtcdPasswordFile, &cfg.ZK)
	f.Int64Var(&cfg.MaxRulesBytes, "max-rules-bytes", cfg.MaxRulesBytes, "largest rule file read; a larger one is refused and the rules in force stay")
	f.BoolVar(&cfg.Watch, "watch", cfg.Watch, "reload the rules when the rule file changes (SIGHUP and POST /rules/reload always do)")
	f.DurationVar(&cfg.WatchSettle, "watch-settle", cfg.WatchSettle, "how long a rule file written in place must stay unchanged before it is read, so that a file written in parts is not loaded half-written while its writer pauses for less than this (write and rename to be safe from any pause: a file renamed in, or a ConfigMap swap, is read at once); 0 reads it at once")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "proxy listen address")
	f.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "admin listen address (/healthz, /readyz, /rules, /metrics); always plain HTTP, so keep it on an internal network")
	f.StringVar(&cfg.Upstream, "upstream", cfg.Upstream, "upstream base URL admitted requests are forwarded to, e.g. http://127.0.0.1:8081 (h2c://host:port for HTTP/2 without TLS, as gRPC servers speak it); with routes in the rule file, where requests no route matches go (optional then)")
	f.BoolVar(&cfg.DemoUpstream, "demo-upstream", cfg.DemoUpstream, "start a built-in JSON echo upstream on loopback and forward to it")
	f.StringVar(&cfg.AppHeader, "app-header", cfg.AppHeader, "request header carrying the caller's app ID")
	f.BoolVar(&cfg.ForwardAppHeader, "forward-app-header", cfg.ForwardAppHeader, "pass the app header on to the upstream (by default it is removed before forwarding)")
	f.StringVar(&cfg.KeyHeader, "key-header", cfg.KeyHeader, "request header carrying the API key of callers whose app lists keys in the rule file; removed before forwarding")
	f.StringVar(&cfg.AppFrom, "app-from", cfg.AppFrom, "where the app ID comes from: header (--app-header) or claim:NAME, a claim of the caller's verified JWT (claim:azp); with a claim the app header is ignored and removed, and a request without a valid token gets 401")
	f.StringVar(&cfg.JWTJWKS, "jwt-jwks", cfg.JWTJWKS, "JWKS file or http(s) URL whose keys verify callers' JWTs (RS256, ES256, EdDSA); a file is reloaded when it changes, a URL every --jwt-jwks-refresh and when a token names an unknown kid (at most once per --jwt-jwks-refetch); keys of other algorithms (PS256, RS384…) are skipped, and the last good set stays when a reload fails")
	f.DurationVar(&cfg.JWTJWKSRefresh, "jwt-jwks-refresh", cfg.JWTJWKSRefresh, "how often a --jwt-jwks URL is fetched again")
	f.DurationVar(&cfg.JWTJWKSRefetch, "jwt-jwks-refetch", cfg.JWTJWKSRefetch, "least time between two fetches of a --jwt-jwks URL made because a token named a kid the keys in force lack (a key rotated in since the last refresh); tokens with unknown kids in between are refused without a fetch")
	f.StringVar(&cfg.JWTHMACSecretFile, "jwt-hmac-secret-file", cfg.JWTHMACSecretFile, "file whose trimmed contents (at least 32 bytes) verify HS256 JWTs; for tests and small setups")
	f.StringVar(&cfg.JWTIssuer, "jwt-issuer", cfg.JWTIssuer, "the iss a JWT must carry (not checked when empty)")
	f.StringVar(&cfg.JWTAudience, "jwt-audience", cfg.JWTAudience, "a value a JWT's aud must hold (not checked when empty)")
	f.StringVar(&cfg.JWTHeader, "jwt-header", cfg.JWTHeader, "header carrying the JWT: in Authorization with the Bearer scheme, in another header the token alone")
	f.Var(&cfg.UnknownCallers, "unknown-callers", `callers with no configured app ID: allow (limited by the "*" section) or reject (403)`)
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxies", cfg.TrustedProxies, "comma-separated CIDRs of proxies whose X-Forwarded-For is believed (and passed on to the upstream with the peer appended)")
	f.IntVar(&cfg.IPv4Prefix, "ipv4-prefix", cfg.IPv4Prefix, "per-IP counters key on the client's IPv4 network of this many bits (32: each address)")
	f.IntVar(&cfg.IPv6Prefix, "ipv6-prefix", cfg.IPv6Prefix, "per-IP counters key on the client's IPv6 network of this many bits (64: one counter per /64, which one client usually holds whole)")
	f.Var(&cfg.MethodOverride, "method-override", "a POST's X-HTTP-Method-Override (or X-HTTP-Method, X-Method-Override, ?_method=): match (rules match the method it names; it is forwarded) or strip (removed before forwarding). Overrides on other methods are always removed")
	f.StringSliceVar(&cfg.AllowUpgrade, "allow-upgrade", cfg.AllowUpgrade, "protocols a request may upgrade to (Upgrade header); any other upgrade is removed before forwarding. h2c cannot be allowed")
	f.BoolVar(&cfg.PreserveHost, "preserve-host", cfg.PreserveHost, "forward the client's Host header instead of the --upstream host")
	addCounterStoreFlags(f, &cfg.Config)
	f.DurationVar(&cfg.UpstreamTimeout, "upstream-timeout", cfg.UpstreamTimeout, "longest wait for the upstream's response headers before 504 (a route may set its own timeout); also bounds each write of a request to the upstream, so that an upstream that stops reading a body gets 504 too")
	f.StringSliceVar(&cfg.ReadyUpstreams, "ready-upstream", cfg.ReadyUpstreams, "upstreams of the rule file that /readyz depends on: 503 while one has no healthy target (repeatable or comma-separated)")
	f.IntVar(&cfg.LimitStatus, "limit-status", cfg.LimitStatus, "status code of a limited response")
	f.Int64Var(&cfg.MaxBodyMemory, "max-body-memory", cfg.MaxBodyMemory, "most bytes of request bodies read for keys (by: body:FIELD, reserve: estimate) held at once, at least 262144 (set it above the largest maxBody); past it such a request gets 503 body_memory_full (0: 256 MiB; -1: no cap)")
	f.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "most requests waiting for room at once under rules with maxDelay; past it they are refused at once (0: 1000)")
	f.DurationVar(&cfg.RetryAfterJitter, "retry-after-jitter", cfg.RetryAfterJitter, "add 0 to this many whole seconds, at random, to each Retry-After, so that refused clients do not return in lockstep (0: none)")
	f.Var(&cfg.RateLimitHeaders, "ratelimit-headers", "rate-limit response headers: both, draft (RateLimit, RateLimit-Policy), legacy (X-RateLimit-*), none")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "longest drain of in-flight requests on SIGTERM")
	f.DurationVar(&cfg.DrainDelay, "drain-delay", cfg.DrainDelay, "on SIGTERM, how long /readyz answers 503 while the proxy still accepts and serves new connections, before it stops accepting and drains: longer than a load balancer takes to act on a failing /readyz (its check interval times its failure threshold). 0 stops accepting at once (Kubernetes waits in preStop instead)")
	f.StringVar(&cfg.AccessLog, "access-log", cfg.AccessLog, "write one JSON line per request to stdout, stderr or this file (off when empty)")
	f.BoolVar(&cfg.AccessLogKeys, "access-log-keys", cfg.AccessLogKeys, "write the header and query values of keyed limits to the access log as they are, rather than the first 16 hex digits of their HMAC-SHA256 under the key-hash secret")
	f.StringVar(&cfg.KeyHashSecretFile, "key-hash-secret-file", cfg.KeyHashSecretFile, "file keeping the secret under which the access log and GET /top hash the values of keyed limits; created with a random secret when missing (default: the --access-log file's path + .key when it is a file, else a secret of the process, not kept)")
	f.BoolVar(&cfg.TopKeys, "top-keys", cfg.TopKeys, "show the header, query and claim values of keyed limits at GET /top as they are, rather than hashed as in the access log")
	f.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "serve the Go profiler on the admin port at /debug/pprof/")
	f.BoolVar(&traces, "tracing", false, tracingUsage)
	f.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", cfg.ReadHeaderTimeout, "longest a client may take to send a request's headers (and TLS handshake) before the proxy closes the connection, and the part of its body a limit keyed on the body reads (else 408); stops slowloris clients. Whole requests and responses have no timeout, so that streams work")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "longest a keep-alive connection to the proxy may wait for its next request")
	f.IntVar(&cfg.MaxHeaderBytes, "max-header-bytes", cfg.MaxHeaderBytes, "largest request line and headers in bytes, else 431; the default 64 KiB is well above what browsers and proxies send (8-16 KiB) and caps the memory a connection can pin")
	f.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate (chain) file: with --tls-key, the proxy serves HTTPS and HTTP/2, reloading the pair when either file changes or on SIGHUP. The admin port stays plain HTTP: keep it on an internal network")
	f.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key file of --tls-cert")
	f.BoolVar(&cfg.H2C, "h2c", cfg.H2C, "serve HTTP/2 without TLS (prior knowledge: plaintext gRPC clients) on the proxy port besides HTTP/1.1; not with --tls-cert. Routes reach such servers with h2c:// targets")
	f.StringVar(&cfg.AdminToken, "admin-token", cfg.AdminToken, "bearer token required by POST /rules/reload on the admin port, which is disabled without one; prefer GATEWAY_ADMIN_TOKEN or --admin-token-file to a flag (visible in ps)")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", cfg.AdminTokenFile, "file whose contents (trimmed) are the --admin-token; exclusive with --admin-token")
	f.StringVar(&cfg.AlertWebhook, "alert-webhook", cfg.AlertWebhook, "URL that receives a signed POST of JSON when a caller's budget crosses an alert threshold (alerts: on a rule or plan); without it alerts are only counted in gateway_budget_alerts_total")
	f.StringVar(&cfg.AlertSecretFile, "alert-secret-file", cfg.AlertSecretFile, "file whose trimmed contents sign each --alert-webhook call: X-Gateway-Signature is sha256= and the hex HMAC-SHA256 of the body")
	f.IntVar(&cfg.AlertQueue, "alert-queue", cfg.AlertQueue, "alerts that may wait for --alert-webhook; past it they are dropped and counted (default 1000)")
	f.Var(&logFormat, "log-format", "log format: json or text")
	f.Var(&logLevel, "log-level", "log level: debug, info, warn, error")
	return cmd
}

// serve runs the gateway of cfg until SIGTERM or SIGINT, then drains it:
// requests in flight finish, /readyz answers 503, and a second SIGTERM or
// SIGINT exits at once. SIGHUP reloads the rules and the TLS certificate
// pair, during the drain too: it is never left to its default action,
// which would end the process.
func serve(cfg server.Config) error {
	// Subscribed before the gateway listens, so that no signal sent once
	// it does is lost or fatal.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	srv, err := server.New(cfg)
	if errors.Is(err, ruleset.ErrNoUpstream) {
		return usageError{err} // as a missing flag is
	}
	if err != nil {
		return err
	}
	ctx, stop := onSignals(sigs, func() { srv.Reload() }, cfg.Logger, cfg.ShutdownTimeout, ": requests still in flight are cut off")
	defer stop()
	return srv.Serve(ctx)
}

// onSignals handles the signals of a serving process that arrive on
// sigs: SIGHUP calls reload (which logs its outcome), a first SIGTERM or
// SIGINT cancels the returned context (the server drains), a second one
// exits at once, logged with cut appended. The returned function stops
// the handling.
func onSignals(sigs <-chan os.Signal, reload func(), log *slog.Logger, timeout time.Duration, cut string) (context.Context, func()) {
	ctx, drain := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				switch {
				case sig == syscall.SIGHUP:
					reload()
				case ctx.Err() == nil:
					log.Info("draining on "+sig.String()+"; send it again to exit at once", "timeout", timeout)
					drain()
				default:
					log.Warn("exiting at once on a second " + sig.String() + cut)
					os.Exit(exitFailure)
				}
			}
		}
	}()
	return ctx, func() { close(done); drain() }
}

// addCounterStoreFlags adds the flags of the counter store and its fail
// modes (--store, --max-keys, --redis-*, --fail-mode, --local-share) to
// f, bound to cfg: `serve` and `rls` build the same stores.
func addCounterStoreFlags(f *pflag.FlagSet, cfg *stores.Config) {
	f.Var(&cfg.Store, "store", "counter store: memory (this process) or redis (shared by a fleet of gateways)")
	f.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "most counters the memory store keeps; beyond it unknown callers share one overflow counter")
	f.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "redis store: redis://[[user]:password@]host[:port][/db], rediss:// for TLS")
	f.StringSliceVar(&cfg.RedisAddrs, "redis-addrs", cfg.RedisAddrs, "redis store: comma-separated host:port of Redis Cluster seed nodes (--redis-cluster) or Sentinels (--redis-sentinel-master)")
	f.BoolVar(&cfg.RedisCluster, "redis-cluster", cfg.RedisCluster, "redis store: the servers are a Redis Cluster")
	f.StringVar(&cfg.RedisSentinelMaster, "redis-sentinel-master", cfg.RedisSentinelMaster, "redis store: the master name that the Sentinels at --redis-addrs watch")
	f.StringVar(&cfg.RedisUsername, "redis-username", cfg.RedisUsername, "redis store: ACL user (replaces the URL's)")
	f.StringVar(&cfg.RedisPassword, "redis-password", cfg.RedisPassword, "redis store: password (replaces the URL's); prefer GATEWAY_REDIS_PASSWORD to a flag")
	f.BoolVar(&cfg.RedisTLS, "redis-tls", cfg.RedisTLS, "redis store: connect to --redis-addrs with TLS")
	f.DurationVar(&cfg.RedisTimeout, "redis-timeout", cfg.RedisTimeout, "redis store: least wait for Redis's answer to a decision before --fail-mode decides (it adapts up to --redis-timeout-max), and longest for other commands on an open connection")
	f.DurationVar(&cfg.RedisMaxTimeout, "redis-timeout-max", cfg.RedisMaxTimeout, "redis store: longest a decision waits for Redis as the wait adapts to Redis's round trips, from --redis-timeout up (see docs/fleet.md, When Redis fails); --redis-timeout or less keeps the wait fixed")
	f.DurationVar(&cfg.RedisDialTimeout, "redis-dial-timeout", cfg.RedisDialTimeout, "redis store: longest wait to dial a Redis connection, and for the check at start that opens the connections and loads the script")
	f.DurationVar(&cfg.RedisPoolTimeout, "redis-pool-timeout", cfg.RedisPoolTimeout, "redis store: longest wait for a free Redis connection when all are busy")
	f.IntVar(&cfg.RedisLeases, "redis-leases", cfg.RedisLeases, "redis store: most keys of fixed_window and sliding_window limits this gateway holds leases for (see docs/fleet.md, Leases); -1 turns leases off")
	f.StringVar(&cfg.RedisLayout, "redis-layout", cfg.RedisLayout, "redis store: how counters are kept, string (one string each) or hash (as earlier releases kept them: use it while gateways of such a release share this Redis, see docs/fleet.md, Upgrading)")
	f.IntVar(&cfg.RedisBatch, "redis-batch", cfg.RedisBatch, "redis store: most decisions sent to one Redis node in one round trip while another is in flight; 1 sends each alone")
	f.IntVar(&cfg.RedisMaxKeys, "redis-max-keys", cfg.RedisMaxKeys, "redis store: a new caller's counter (per-IP, header, query and claim keys) is created only while the Redis database holds fewer than this many keys, counting every key of it (on a Cluster, each master's); beyond it new callers share their rule's overflow counter; -1 for no budget")
	f.Var(&cfg.FailMode, "fail-mode", "redis store: when Redis fails, local (limit in memory with limit × --local-share), open (admit) or closed (503)")
	f.Var((*stores.LocalShare)(&cfg.LocalShare), "local-share", "the share of each limit one gateway admits under --fail-mode local: auto (1 / the number of gateways last seen in Redis) or a number in (0, 1]")
}
