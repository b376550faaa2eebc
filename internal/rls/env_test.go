package rls

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/stores"
)

// envoyGatewayEnv is the environment Envoy Gateway gives its rate-limit
// container (envoyproxy/gateway
// internal/infrastructure/kubernetes/ratelimit/resource.go), with
// Prometheus on as its Helm values turn it on.
var envoyGatewayEnv = map[string]string{
	"REDIS_SOCKET_TYPE":                  "tcp",
	"REDIS_URL":                          "redis.redis.svc:6379",
	"RUNTIME_ROOT":                       "/data",
	"RUNTIME_SUBDIRECTORY":               "ratelimit",
	"RUNTIME_IGNOREDOTFILES":             "true",
	"RUNTIME_WATCH_ROOT":                 "false",
	"LOG_LEVEL":                          "info",
	"USE_STATSD":                         "false",
	"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL":         "envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
	"GRPC_SERVER_USE_TLS":                "true",
	"GRPC_SERVER_TLS_CERT":               "/certs/tls.crt",
	"GRPC_SERVER_TLS_KEY":                "/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT":            "/certs/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    "/certs/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  "/certs/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"USE_PROMETHEUS":                     "true",
	"PROMETHEUS_ADDR":                    ":19001",
}

func lookupIn(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestFromEnvEnvoyGateway(t *testing.T) {
	t.Parallel()
	e, err := FromEnv(lookupIn(envoyGatewayEnv), ServerConfig{Store: stores.DefaultConfig(), MaxConfigBytes: 1 << 20, ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := e.Server
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"grpc", c.Listen, "0.0.0.0:8081"},
		{"admin", c.AdminListen, "0.0.0.0:8080"},
		{"debug", c.DebugListen, "0.0.0.0:6070"},
		{"metrics", c.MetricsListen, ":19001"},
		{"metrics path", c.MetricsPath, "/metrics"},
		{"xds url", c.XDS.ServerURL, "envoy-gateway:18001"},
		{"xds node", c.XDS.NodeID, "envoy-ratelimit"},
		{"xds tls", c.XDS.UseTLS, true},
		{"xds cert", c.XDS.CertFile + " " + c.XDS.KeyFile + " " + c.XDS.CAFile, "/certs/tls.crt /certs/tls.key /certs/ca.crt"},
		{"force start", c.ForceStart, true},
		{"grpc tls", c.TLSCert + " " + c.TLSKey, "/certs/tls.crt /certs/tls.key"},
		// GRPC_SERVER_TLS_CA_CERT is not envoyproxy/ratelimit's name
		// (GRPC_CLIENT_TLS_CACERT is): ignored as it ignores it.
		{"client ca", c.TLSClientCA, ""},
		{"redis", c.Store.RedisURL, "redis://redis.redis.svc:6379"},
		{"redis timeout", c.Store.RedisTimeout, 10 * time.Second},
		{"store", c.Store.Store, stores.StoreRedis},
		{"reference counting", c.ReferenceCounting, true},
		{"headers", c.Headers, ratelimitheader.None},
		{"reference headers", c.ReferenceHeaders == nil, true},
		{"log level", e.LogLevel, slog.LevelInfo},
		{"log json", e.LogJSON, false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// Ignored, but told: an operator who set it expects client
	// certificates to be required.
	if got := strings.Join(e.Ignored, "; "); !strings.Contains(got, "GRPC_SERVER_TLS_CA_CERT: ") || !strings.Contains(got, "GRPC_CLIENT_TLS_CACERT") {
		t.Errorf("ignored: got %q, want GRPC_SERVER_TLS_CA_CERT named with GRPC_CLIENT_TLS_CACERT", got)
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(Env) string // "" when right
	}{
		{"defaults", map[string]string{}, func(e Env) string {
			c := e.Server
			if c.ConfigPath != "/srv/runtime_data/current/config" || !c.Watch || c.Store.RedisURL != "unix:///var/run/nutcracker/ratelimit.sock" || e.LogLevel != slog.LevelWarn || c.MetricsListen != "" || e.Set != 0 {
				return "not envoyproxy/ratelimit's defaults"
			}
			return ""
		}},
		{"files", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "MERGE_DOMAIN_CONFIG": "true"}, func(e Env) string {
			if e.Server.ConfigPath != "/data/ratelimit/config" || !e.Server.Watch || !e.Server.MergeDomains {
				return "config path " + e.Server.ConfigPath
			}
			return ""
		}},
		{"cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:1, b:2", "REDIS_TLS": "true", "REDIS_AUTH": "user:secret"}, func(e Env) string {
			st := e.Server.Store
			if !st.RedisCluster || strings.Join(st.RedisAddrs, ",") != "a:1,b:2" || !st.RedisTLS || st.RedisUsername != "user" || st.RedisPassword != "secret" {
				return "not a TLS cluster a:1,b:2 as user"
			}
			return ""
		}},
		{"sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "pw"}, func(e Env) string {
			st := e.Server.Store
			if st.RedisSentinelMaster != "mymaster" || strings.Join(st.RedisAddrs, ",") != "s1:26379,s2:26379" || st.RedisPassword != "pw" {
				return "not sentinels of mymaster"
			}
			return ""
		}},
		{"tcp with tls and a url", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6380", "REDIS_TLS": "true", "REDIS_TIMEOUT": "2s"}, func(e Env) string {
			if e.Server.Store.RedisURL != "rediss://r:6380" || e.Server.Store.RedisTimeout != 2*time.Second {
				return "url " + e.Server.Store.RedisURL
			}
			return ""
		}},
		{"modes and headers", map[string]string{"SHADOW_MODE": "true", "QUOTA_MODE": "1", "RESPONSE_DYNAMIC_METADATA": "true", "CACHE_KEY_PREFIX": "p_",
			"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, func(e Env) string {
			c := e.Server
			if !c.ShadowMode || !c.QuotaMode || !c.DynamicMetadata || c.KeyPrefix != "p_" || !c.StopOverLimitCount ||
				c.ReferenceHeaders == nil || *c.ReferenceHeaders != (HeaderNames{"RateLimit-Limit", "RateLimit-Remaining", "X-Reset"}) {
				return "modes not read"
			}
			return ""
		}},
		{"ports and uds", map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_UDS": "/tmp/rl.sock", "LOG_FORMAT": "json", "LOG_LEVEL": "DEBUG"}, func(e Env) string {
			if e.Server.AdminListen != "127.0.0.1:0" || e.Server.Listen != "unix:/tmp/rl.sock" || !e.LogJSON || e.LogLevel != slog.LevelDebug {
				return "listeners " + e.Server.AdminListen + " " + e.Server.Listen
			}
			return ""
		}},
		{"xds extras", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone:a,team=b", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s"}, func(e Env) string {
			x := e.Server.XDS
			if x.ServerURL != "localhost:18000" || x.NodeID != "default" || x.NodeMetadata["zone"] != "a" || x.NodeMetadata["team"] != "b" || x.BackoffInitial != time.Second || e.Server.ForceStart {
				return "xds settings not read"
			}
			return ""
		}},
		{"known but not honoured", map[string]string{"USE_STATSD": "true", "NEAR_LIMIT_RATIO": "0.9", "SOMETHING_ELSE": "x"}, func(e Env) string {
			if len(e.Ignored) != 2 || !strings.HasPrefix(e.Ignored[0], "USE_STATSD") {
				return "ignored: " + strings.Join(e.Ignored, "; ")
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := FromEnv(lookupIn(tc.env), ServerConfig{Store: stores.DefaultConfig()})
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(e); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PORT": "http"}, `PORT="http": want a whole number`},
		{map[string]string{"SHADOW_MODE": "yes please"}, `SHADOW_MODE="yes please": want true or false`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, `CONFIG_TYPE="GRPC_XDS_DELTA"`},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "memcache is not supported"},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "alone"}, "REDIS_URL"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, "GRPC_MAX_CONNECTION_AGE"},
	} {
		_, err := FromEnv(lookupIn(tc.env), ServerConfig{Store: stores.DefaultConfig()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want …%s…", tc.env, err, tc.want)
		}
	}
}
