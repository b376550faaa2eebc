package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/enumflag"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/tracing"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// Config is everything `gateway serve` takes from flags and environment.
// Start from DefaultConfig: its values are the flags' defaults, and New
// refuses the zero values that would mean "no limit" to net/http.
type Config struct {
	// ConfigPath is the rule file, or the etcd key or ZooKeeper znode of
	// the rules: etcd://host:2379[,host:2379]/key (etcds:// for TLS),
	// zk://host:2181[,host:2181]/path (zks:// for TLS).
	ConfigPath string
	// RulesCache, with rules in a store, is a file written with every
	// good value, from which the gateway starts when the store is
	// unreachable at start. Empty: no cache, and an unreachable store
	// fails the start.
	RulesCache string
	// Etcd are the credentials and TLS files of an etcd rule source.
	Etcd source.EtcdAuth
	// EtcdPasswordFile, exclusive with Etcd.Password, is a file whose
	// trimmed contents are the etcd password.
	EtcdPasswordFile string
	// ZK are the credentials and TLS files of a ZooKeeper rule source.
	ZK source.ZKAuth
	// SourceProbeInterval is how often a rule store is checked. Default
	// source.DefaultProbeInterval.
	SourceProbeInterval time.Duration
	// FallbackRules, if not nil, are used (with a warning) when ConfigPath
	// does not exist: the example rules built into the binary, so that
	// the gateway starts anywhere. Set only when the operator did not
	// name a file.
	FallbackRules []byte
	// Watch reloads the rules when the rule file changes on disk.
	Watch bool
	// WatchSettle is how long the rule file must stay unchanged (size
	// and modification time) after a write in place before it is read,
	// so that a file written in parts is not loaded half-written while
	// its writer pauses for less than this; a file renamed in or swapped
	// through a symlink is read at once; 0 reads it at once. Default
	// watch.DefaultSettle (2s).
	WatchSettle time.Duration
	// MaxRulesBytes is the largest rule file read; a larger one is
	// refused, and the rules in force stay.
	MaxRulesBytes int64
	// Listen is the proxy's address.
	Listen string
	// AdminListen is the admin address: loopback by default, since its
	// reads show callers and rules; deployments that scrape it from
	// elsewhere set an address of their own (docs/operations.md, "Admin
	// port").
	AdminListen string
	// Upstream is the base URL admitted requests go to. Required unless
	// DemoUpstream.
	Upstream string
	// DemoUpstream starts a small built-in upstream on loopback and
	// forwards to it, so that the gateway works with nothing else running.
	DemoUpstream bool
	// AppHeader carries the caller's app ID.
	AppHeader string
	// ForwardAppHeader passes the app header on to the upstream; by
	// default it is removed.
	ForwardAppHeader bool
	// KeyHeader carries the API key of callers whose app has keys.
	KeyHeader string
	// UnknownCallers says what happens to callers that name no configured
	// app.
	UnknownCallers UnknownCallers
	// JWTJWKS is the JWKS file, or http(s):// URL, whose keys verify
	// callers' tokens (RS256, ES256, EdDSA): a file is read again when
	// it changes, a URL every JWTJWKSRefresh. Empty: none.
	JWTJWKS string
	// JWTJWKSRefresh is how often a JWKS URL is fetched again; the last
	// good key set stays when a fetch fails. Default
	// jwtauth.DefaultRefresh (5m).
	JWTJWKSRefresh time.Duration
	// JWTJWKSRefetch is the least time between two fetches of a JWKS
	// URL made because a token named a kid the keys in force lack.
	// Default jwtauth.DefaultRefetch (1m).
	JWTJWKSRefetch time.Duration
	// JWTHMACSecretFile is a file whose trimmed contents (at least 32
	// bytes) verify HS256 tokens. Empty: HS256 is refused.
	JWTHMACSecretFile string
	// JWTIssuer and JWTAudience, when not empty, are the iss a token
	// must carry and a value its aud must hold.
	JWTIssuer, JWTAudience string
	// JWTHeader carries the token. Default proxy.DefaultJWTHeader
	// (Authorization, Bearer scheme).
	JWTHeader string
	// AppFrom is where the app ID comes from: "header" (AppHeader, the
	// default) or "claim:NAME", a claim of the verified token.
	AppFrom string
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string
	// IPv4Prefix and IPv6Prefix are the lengths of the address groups
	// that per-IP counters key on.
	IPv4Prefix, IPv6Prefix int
	// MethodOverride is what happens to a method override.
	MethodOverride proxy.MethodOverride
	// AllowUpgrade lists the protocols a request may upgrade to.
	AllowUpgrade []string
	// PreserveHost forwards the client's Host header.
	PreserveHost bool
	// Config holds the store settings (--store, --max-keys, --redis-*,
	// --fail-mode, --local-share); New sets its SlotTTL and Logger.
	stores.Config
	// UpstreamTimeout bounds the wait for the upstream's response
	// headers, --upstream's and the routes' that set no timeout.
	UpstreamTimeout time.Duration
	// ReadyUpstreams are upstreams of the rule file that /readyz depends
	// on: it answers 503 while one of them has no target in its pool.
	ReadyUpstreams []string
	// LimitStatus is the status of a limited response, 4xx or 5xx.
	LimitStatus int
	// MaxWaiting caps the requests waiting for room (maxDelay) at once;
	// 0 means proxy.DefaultMaxWaiting.
	MaxWaiting int
	// MaxBodyMemory caps the bytes of request bodies read for keys held
	// at once; 0 means proxy.DefaultBodyMemory, -1 no cap.
	MaxBodyMemory int64
	// RetryAfterJitter adds up to that many whole seconds, at random, to
	// each Retry-After; 0 for none.
	RetryAfterJitter time.Duration
	// RateLimitHeaders selects the rate-limit response headers.
	RateLimitHeaders ratelimitheader.Mode
	// ShutdownTimeout bounds the drain of in-flight requests.
	ShutdownTimeout time.Duration
	// DrainDelay is how long, once Serve's context is done, /readyz
	// answers 503 draining while the proxy still accepts connections and
	// serves them as usual, before it stops accepting and drains: long
	// enough for a load balancer that polls /readyz to take the gateway
	// out of rotation first. 0 (the default) stops accepting at once,
	// for Kubernetes, whose preStop hook waits instead.
	DrainDelay time.Duration
	// ReadHeaderTimeout bounds the reading of a request's line and
	// headers (and the TLS handshake) on the proxy port, so that clients
	// that send them slowly or never (slowloris) cannot hold connections
	// open. There is deliberately no timeout on the whole request or
	// response: it would cut off long uploads and streamed responses.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection on the proxy
	// port waits for its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the size of a request's line and headers on the
	// proxy port; a larger request gets 431.
	MaxHeaderBytes int
	// TLSCert and TLSKey, both or neither, are PEM files of the proxy
	// port's certificate (chain) and key: with them the proxy serves
	// HTTPS with HTTP/2, and reloads the pair when either file changes or
	// on Reload. The admin port stays plain HTTP.
	TLSCert, TLSKey string
	// H2C serves HTTP/2 without TLS (prior knowledge, RFC 9113 §3.3) on
	// the proxy port besides HTTP/1.1, for plaintext gRPC clients.
	// Without TLS only; the upgrade from HTTP/1.1 (Upgrade: h2c) is
	// never served.
	H2C bool
	// AdminToken is the bearer token that POST /rules/reload and POST
	// /usage/reset require (without one they are disabled, 403), and
	// that GET /rules, /top and /usage then require too.
	AdminToken string
	// AdminTokenFile, exclusive with AdminToken, is a file whose contents,
	// trimmed of white space, are the admin token.
	AdminTokenFile string
	// AlertWebhook, if not empty, is the URL that receives budget alerts
	// (docs/plans-and-tokens.md, "Budget alerts"); AlertSecretFile a
	// file whose trimmed contents sign them; AlertQueue bounds the
	// alerts waiting to be sent (default alert.DefaultQueue).
	AlertWebhook, AlertSecretFile string
	AlertQueue                    int
	// AccessLog, if not empty, is where one JSON line per request goes:
	// "stdout", "stderr" or a file path.
	AccessLog string
	// AccessLogKeys writes the header and query values of keyed limits
	// to the access log as they are; by default it writes their hashes
	// (observe.KeyHasher), which replay counts by just as well.
	AccessLogKeys bool
	// KeyHashSecretFile keeps the secret under which the access log and
	// GET /top hash the values of keyed limits: read if it exists,
	// created with a new random secret if not. Empty: AccessLog with
	// ".key" appended when AccessLog is a file; with no file access log,
	// a random secret of the process, not kept, so that hashes change at
	// each start (docs/operations.md, "Access log").
	KeyHashSecretFile string
	// TopKeys shows the header, query and claim values of keyed limits
	// at GET /top as they are; by default they are hashed as in the
	// access log.
	TopKeys bool
	// Pprof serves the Go profiler on the admin port at /debug/pprof/.
	Pprof bool
	// Tracing exports OpenTelemetry traces of the requests when
	// Tracing.Enabled (docs/operations.md, "Traces"): the values of
	// keyed limits on them are hashed unless AccessLogKeys.
	Tracing tracing.Config
	// Version is the build's version, for gateway_build_info.
	Version string
	// Logger is the one logger. nil means slog.Default().
	Logger *slog.Logger
}

// DefaultMaxHeaderBytes is the default Config.MaxHeaderBytes: 64 KiB, far
// above what real clients send (browsers and proxies cap a request's
// headers at 8–16 KiB, cookies included) and a sixteenth of net/http's
// 1 MiB, so that each connection still reading headers can pin only that
// much memory.
const DefaultMaxHeaderBytes = 64 << 10

// DefaultConfig returns the configuration of `gateway serve` with no
// flags: the flags' defaults are these values.
func DefaultConfig() Config {
	return Config{
		ConfigPath:        "configs/ratelimiter-rule.yaml",
		Watch:             true,
		WatchSettle:       watch.DefaultSettle,
		MaxRulesBytes:     config.DefaultMaxBytes,
		Listen:            ":8080",
		AdminListen:       "127.0.0.1:9090",
		AppHeader:         proxy.DefaultAppHeader,
		KeyHeader:         proxy.DefaultKeyHeader,
		UnknownCallers:    AllowUnknown,
		JWTJWKSRefresh:    jwtauth.DefaultRefresh,
		JWTJWKSRefetch:    jwtauth.DefaultRefetch,
		JWTHeader:         proxy.DefaultJWTHeader,
		AppFrom:           AppFromHeader,
		IPv4Prefix:        ruleset.DefaultIPv4Prefix,
		IPv6Prefix:        ruleset.DefaultIPv6Prefix,
		MethodOverride:    proxy.OverrideMatch,
		AllowUpgrade:      slices.Clone(proxy.DefaultAllowUpgrade),
		Config:            stores.DefaultConfig(),
		UpstreamTimeout:   proxy.DefaultUpstreamTimeout,
		LimitStatus:       http.StatusTooManyRequests,
		RateLimitHeaders:  ratelimitheader.Both,
		ShutdownTimeout:   30 * time.Second,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
}

// Validate reports the first setting of c that cannot work, naming its
// flag, without touching the network or the disk: the command line
// reports it as a usage error.
func (c *Config) Validate() error {
	switch {
	case c.ConfigPath == "":
		return errors.New("--config is empty: name a rule file")
	case c.RulesCache != "" && !source.IsStore(c.ConfigPath):
		return errors.New("--rules-cache is for rules in a store (--config etcd://… or zk://…); a rule file needs no cache")
	case c.Etcd.Password != "" && c.EtcdPasswordFile != "":
		return errors.New("--etcd-password and --etcd-password-file are exclusive: pass one")
	case c.ZK.Password != "" && c.ZK.PasswordFile != "":
		return errors.New("GATEWAY_ZK_PASSWORD and --zk-password-file are exclusive: set one")
	case c.Listen == "":
		return errors.New("--listen is empty: give an address such as :8080")
	case c.AdminListen == "":
		return errors.New("--admin-listen is empty: give an address such as :9090")
	case c.DemoUpstream && c.Upstream != "":
		return errors.New("--demo-upstream and --upstream are exclusive")
	case c.LimitStatus < 400 || c.LimitStatus > 599:
		return fmt.Errorf("--limit-status %d is not a 4xx or 5xx status", c.LimitStatus)
	case c.MaxBodyMemory < -1 || c.MaxBodyMemory > 0 && c.MaxBodyMemory < proxy.MinBodyMemory:
		return fmt.Errorf("--max-body-memory %d: set the bytes of request bodies read for keys held at once, at least %d, 0 for the default %d, or -1 for no cap", c.MaxBodyMemory, proxy.MinBodyMemory, proxy.DefaultBodyMemory)
	case c.MaxWaiting < 0:
		return fmt.Errorf("--max-waiting %d is negative; set how many requests may wait for room at once, or 0 for the default %d", c.MaxWaiting, proxy.DefaultMaxWaiting)
	case c.RetryAfterJitter < 0 || c.RetryAfterJitter > time.Hour:
		return fmt.Errorf("--retry-after-jitter %s is outside 0..1h", c.RetryAfterJitter)
	case c.IPv4Prefix < 1 || c.IPv4Prefix > 32:
		return fmt.Errorf("--ipv4-prefix %d is outside 1..32", c.IPv4Prefix)
	case c.IPv6Prefix < 1 || c.IPv6Prefix > 128:
		return fmt.Errorf("--ipv6-prefix %d is outside 1..128", c.IPv6Prefix)
	case slices.ContainsFunc(c.AllowUpgrade, func(p string) bool { return strings.EqualFold(strings.TrimSpace(p), "h2c") }):
		return errors.New("--allow-upgrade cannot allow h2c: the upstream would serve HTTP/2 requests on that connection that the gateway never counts")
	case c.WatchSettle < 0:
		return fmt.Errorf("--watch-settle %s is negative (0 reads a changed rule file at once)", c.WatchSettle)
	case c.Store == stores.StoreRedis && c.RedisURL == "" && len(slices.DeleteFunc(slices.Clone(c.RedisAddrs), func(a string) bool { return strings.TrimSpace(a) == "" })) == 0:
		return errors.New("--store redis needs a server: set --redis-url redis://host:6379/0, or --redis-addrs host:port,… with --redis-cluster or --redis-sentinel-master")
	case c.RedisCluster && c.RedisSentinelMaster != "":
		return errors.New("--redis-cluster and --redis-sentinel-master are exclusive: a Redis Cluster has no Sentinels")
	case c.MaxRulesBytes <= 0:
		return fmt.Errorf("--max-rules-bytes %d is not positive", c.MaxRulesBytes)
	case c.UpstreamTimeout <= 0:
		return fmt.Errorf("--upstream-timeout %s is not positive", c.UpstreamTimeout)
	case c.DrainDelay < 0:
		return fmt.Errorf("--drain-delay %s is negative", c.DrainDelay)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout %s is not positive", c.ShutdownTimeout)
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("--read-header-timeout %s is not positive: it bounds how long a client may take to send its headers", c.ReadHeaderTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("--idle-timeout %s is not positive: it bounds how long a keep-alive connection may sit idle", c.IdleTimeout)
	case c.MaxHeaderBytes <= 0:
		return fmt.Errorf("--max-header-bytes %d is not positive: it caps the size of a request's headers", c.MaxHeaderBytes)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: pass both to serve HTTPS, or neither for plain HTTP")
	case c.H2C && c.TLSCert != "":
		return errors.New("--h2c serves HTTP/2 without TLS; with --tls-cert the proxy serves HTTP/2 over TLS already: drop --h2c")
	case c.AdminToken != "" && c.AdminTokenFile != "":
		return errors.New("--admin-token and --admin-token-file are exclusive: pass one")
	case c.AdminToken != "" && strings.TrimSpace(c.AdminToken) == "":
		return errors.New("--admin-token is only white space: set a token, or none to disable POST /rules/reload")
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.validateJWT(); err != nil {
		return err
	}
	if source.IsStore(c.ConfigPath) {
		if err := source.CheckSpec(c.ConfigPath); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
	}
	if _, err := proxy.ParseTrustedProxies(c.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	if c.Upstream != "" {
		if _, err := proxy.ParseUpstreamURL(c.Upstream); err != nil {
			return fmt.Errorf("--upstream: %w", err)
		}
	}
	return nil
}

// UnknownCallers says what happens to callers that name no configured app.
// It is a pflag.Value.
type UnknownCallers string

// The choices of --unknown-callers.
const (
	// AllowUnknown limits them by the rule file's "*" section.
	AllowUnknown UnknownCallers = "allow"
	// RejectUnknown answers them 403.
	RejectUnknown UnknownCallers = "reject"
)

func (u UnknownCallers) String() string { return string(u) }

// Set parses an --unknown-callers value.
func (u *UnknownCallers) Set(s string) error { return enumflag.Set(u, s, AllowUnknown, RejectUnknown) }

// Type names the value's kind in help text.
func (*UnknownCallers) Type() string { return "allow|reject" }
