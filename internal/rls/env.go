package rls

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/stores"
)

// Env is what FromEnv reads from envoyproxy/ratelimit's environment.
type Env struct {
	// Server is the configuration the environment describes.
	Server ServerConfig
	// LogLevel and LogJSON are LOG_LEVEL and LOG_FORMAT.
	LogLevel slog.Level
	LogJSON  bool
	// Ignored lists, as "NAME: why", the variables set that this service
	// reads but cannot honour, for the log.
	Ignored []string
	// Set is how many of envoyproxy/ratelimit's variables are set.
	Set int
}

// FromEnv returns the configuration that envoyproxy/ratelimit's
// environment variables describe (docs/rls.md, "Running as
// envoyproxy/ratelimit"), starting from base: where it listens (PORT,
// GRPC_PORT, DEBUG_PORT, PROMETHEUS_ADDR), where its config comes from
// (RUNTIME_* files or CONFIG_TYPE=GRPC_XDS_SOTW), its Redis (REDIS_*),
// TLS and modes, with envoyproxy/ratelimit's defaults for what is unset
// and this gateway's reference counting on. lookup is os.LookupEnv in
// production. Variables it does not know are ignored, as
// envoyproxy/ratelimit ignores them; a known one with a value it cannot
// read is an error naming it.
func FromEnv(lookup func(string) (string, bool), base ServerConfig) (Env, error) {
	r := envReader{lookup: lookup}
	e := Env{Server: base, LogLevel: slog.LevelWarn}
	c := &e.Server

	host := r.str("HOST", "0.0.0.0")
	c.AdminListen = net.JoinHostPort(host, strconv.Itoa(r.integer("PORT", 8080)))
	c.DebugListen = net.JoinHostPort(r.str("DEBUG_HOST", "0.0.0.0"), strconv.Itoa(r.integer("DEBUG_PORT", 6070)))
	c.Listen = net.JoinHostPort(r.str("GRPC_HOST", "0.0.0.0"), strconv.Itoa(r.integer("GRPC_PORT", 8081)))
	if uds := r.str("GRPC_UDS", ""); uds != "" {
		c.Listen = "unix:" + uds
	}
	c.MaxConnectionAge = r.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	c.MaxConnectionAgeGrace = r.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	if r.boolean("GRPC_SERVER_USE_TLS", false) {
		c.TLSCert, c.TLSKey = r.str("GRPC_SERVER_TLS_CERT", ""), r.str("GRPC_SERVER_TLS_KEY", "")
		c.TLSClientCA, c.TLSClientSAN = r.str("GRPC_CLIENT_TLS_CACERT", ""), r.str("GRPC_CLIENT_TLS_SAN", "")
	}

	switch lvl := strings.ToLower(r.str("LOG_LEVEL", "warn")); lvl {
	case "trace", "debug":
		e.LogLevel = slog.LevelDebug
	case "info":
		e.LogLevel = slog.LevelInfo
	case "warn", "warning":
		e.LogLevel = slog.LevelWarn
	case "error", "fatal", "panic":
		e.LogLevel = slog.LevelError
	default:
		r.fail("LOG_LEVEL", lvl, "trace, debug, info, warn, error, fatal or panic")
	}
	switch f := strings.ToLower(r.str("LOG_FORMAT", "text")); f {
	case "text":
	case "json":
		e.LogJSON = true
	default:
		r.fail("LOG_FORMAT", f, "text or json")
	}

	switch t := r.str("CONFIG_TYPE", "FILE"); strings.ToUpper(t) {
	case "FILE":
		c.ConfigPath = filepath.Join(r.str("RUNTIME_ROOT", "/srv/runtime_data/current"), r.str("RUNTIME_SUBDIRECTORY", ""), r.str("RUNTIME_APPDIRECTORY", "config"))
		// envoyproxy/ratelimit always reloads on changes; RUNTIME_WATCH_ROOT
		// only chooses whether it watches RUNTIME_ROOT or the config
		// directory, which watching the directory covers.
		r.boolean("RUNTIME_WATCH_ROOT", true)
		c.Watch = true
	case "GRPC_XDS_SOTW":
		x := &c.XDS
		x.ServerURL = r.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
		x.NodeID = r.str("CONFIG_GRPC_XDS_NODE_ID", "default")
		x.NodeMetadata = r.pairs("CONFIG_GRPC_XDS_NODE_METADATA")
		x.Headers = r.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
		if r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
			x.UseTLS = true
			x.CertFile, x.KeyFile = r.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""), r.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "")
			x.CAFile, x.ServerSAN = r.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""), r.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "")
		}
		x.BackoffInitial = r.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second)
		x.BackoffMax = r.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second)
		x.MaxMsgSize = r.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0)
		c.ForceStart = r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	default:
		r.fail("CONFIG_TYPE", t, "FILE or GRPC_XDS_SOTW")
	}
	c.MergeDomains = r.boolean("MERGE_DOMAIN_CONFIG", false)
	c.HealthyWithConfig = r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)

	if r.boolean("USE_PROMETHEUS", false) {
		c.MetricsListen = r.str("PROMETHEUS_ADDR", ":9090")
		c.MetricsPath = r.str("PROMETHEUS_PATH", "/metrics")
	}

	c.ShadowMode = r.boolean("SHADOW_MODE", false)
	c.QuotaMode = r.boolean("QUOTA_MODE", false)
	c.DynamicMetadata = r.boolean("RESPONSE_DYNAMIC_METADATA", false)
	c.KeyPrefix = r.str("CACHE_KEY_PREFIX", "")
	c.ReferenceCounting = true
	c.StopOverLimitCount = r.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	c.Headers = ratelimitheader.None
	c.ReferenceHeaders = nil
	if r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		c.ReferenceHeaders = &HeaderNames{
			Limit:     r.str("LIMIT_LIMIT_HEADER", DefaultHeaderNames.Limit),
			Remaining: r.str("LIMIT_REMAINING_HEADER", DefaultHeaderNames.Remaining),
			Reset:     r.str("LIMIT_RESET_HEADER", DefaultHeaderNames.Reset),
		}
	}

	switch b := strings.ToLower(r.str("BACKEND_TYPE", "redis")); b {
	case "redis":
		r.redis(&c.Store)
	default:
		r.fail("BACKEND_TYPE", b, "redis (memcache is not supported)")
	}

	for _, n := range []struct{ name, why string }{
		{"USE_STATSD", "no statsd: metrics are Prometheus's, on the admin port and PROMETHEUS_ADDR"},
		{"USE_DOG_STATSD", "no statsd"},
		{"RUNTIME_IGNOREDOTFILES", "files starting with \".\" are always skipped"},
		{"REDIS_PERSECOND", "per-second limits are counted in REDIS_URL's Redis"},
		{"REDIS_POOL_SIZE", "the Redis store sizes its own pool"},
		{"REDIS_PIPELINE_WINDOW", "the Redis store batches on its own (--redis-batch)"},
		{"REDIS_TLS_CLIENT_CERT", "client certificates to Redis are not supported"},
		{"REDIS_TLS_CACERT", "the system's roots verify Redis"},
		{"LOCAL_CACHE_SIZE_IN_BYTES", "the Redis store keeps leases instead (--redis-leases)"},
		{"NEAR_LIMIT_RATIO", "no near-limit statistics"},
		{"EXPIRATION_JITTER_MAX_SECONDS", "keys expire with their window"},
		// Envoy Gateway sets it; envoyproxy/ratelimit reads
		// GRPC_CLIENT_TLS_CACERT instead, and neither requires client
		// certificates without that.
		{"GRPC_SERVER_TLS_CA_CERT", "not envoyproxy/ratelimit's name either: client certificates are required only with GRPC_CLIENT_TLS_CACERT"},
	} {
		if v, ok := lookup(n.name); ok && v != "" && v != "false" && v != "0" {
			e.Ignored = append(e.Ignored, n.name+": "+n.why)
		}
	}
	e.Set = r.set
	return e, r.err
}

// redis reads the REDIS_* variables into st.
func (r *envReader) redis(st *stores.Config) {
	st.Store = stores.StoreRedis
	socket := strings.ToLower(r.str("REDIS_SOCKET_TYPE", "unix"))
	url := r.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
	useTLS := r.boolean("REDIS_TLS", false)
	scheme := "redis://"
	if useTLS {
		scheme = "rediss://"
	}
	st.RedisURL, st.RedisAddrs, st.RedisCluster, st.RedisSentinelMaster = "", nil, false, ""
	switch typ := strings.ToUpper(r.str("REDIS_TYPE", "SINGLE")); typ {
	case "SINGLE":
		switch {
		case strings.Contains(url, "://"):
			st.RedisURL = url
		case socket == "unix":
			st.RedisURL = "unix://" + url
		case socket == "tcp":
			st.RedisURL = scheme + url
		default:
			r.fail("REDIS_SOCKET_TYPE", socket, "tcp or unix")
		}
	case "CLUSTER":
		st.RedisCluster, st.RedisTLS = true, useTLS
		st.RedisAddrs = splitList(url)
	case "SENTINEL":
		parts := splitList(url)
		if len(parts) < 2 {
			r.fail("REDIS_URL", url, "the master's name and the Sentinels' host:port, comma-separated, for REDIS_TYPE SENTINEL")
			return
		}
		st.RedisSentinelMaster, st.RedisAddrs, st.RedisTLS = parts[0], parts[1:], useTLS
	default:
		r.fail("REDIS_TYPE", typ, "SINGLE, CLUSTER or SENTINEL")
	}
	if auth := r.str("REDIS_AUTH", ""); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			st.RedisUsername, st.RedisPassword = user, pass
		} else {
			st.RedisPassword = auth
		}
	}
	// Theirs, 10 s, rather than this gateway's tight default: a slow
	// Redis waits, as under envoyproxy/ratelimit, rather than going to
	// --fail-mode, whose local counts would disagree with Redis's.
	st.RedisTimeout = r.duration("REDIS_TIMEOUT", 10*time.Second)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// envReader reads variables, keeping the first error.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
	set    int // variables found set
}

func (r *envReader) fail(name, v, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("environment variable %s=%q: want %s", name, v, want)
	}
}

func (r *envReader) str(name, def string) string {
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

func (r *envReader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	if ok {
		r.set++
	}
	return v, ok
}

func (r *envReader) boolean(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, v, "true or false")
	}
	return b
}

func (r *envReader) integer(name string, def int) int {
	v, ok := r.get(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		r.fail(name, v, "a whole number")
	}
	return n
}

func (r *envReader) duration(name string, def time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, v, "a positive duration such as 10s")
	}
	return d
}

// pairs reads "k1:v1,k2=v2" (either separator) into a map.
func (r *envReader) pairs(name string) map[string]string {
	v := r.str(name, "")
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, p := range splitList(v) {
		i := strings.IndexAny(p, ":=")
		if i <= 0 {
			r.fail(name, v, `comma-separated key:value or key=value pairs`)
			return nil
		}
		m[p[:i]] = p[i+1:]
	}
	return m
}
