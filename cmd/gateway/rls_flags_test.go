package main

import (
	"net"
	"testing"

	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/rls"
)

// TestRLSAdminListen checks where the admin port of `gateway rls`
// listens: on loopback by default, as `serve`'s does, since /top and
// /rules show callers and limits; from envoyproxy/ratelimit's environment
// on HOST:PORT (0.0.0.0:8080), where Kubernetes probes reach
// /healthcheck from outside the pod; and where --admin-listen says.
func TestRLSAdminListen(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) rls.ServerConfig {
		t.Helper()
		cfg := rlsDefaults()
		var (
			format          logFormat
			level           levelFlag
			fromEnv, traces bool
		)
		f := pflag.NewFlagSet("rls", pflag.ContinueOnError)
		bindRLSFlags(f, &cfg, &format, &level, &fromEnv, &traces)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse()
	host, _, err := net.SplitHostPort(cfg.AdminListen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default --admin-listen: got %q, want a loopback address", cfg.AdminListen)
	}
	if cfg := parse("--admin-listen", ":9091"); cfg.AdminListen != ":9091" {
		t.Errorf("--admin-listen :9091: got %q", cfg.AdminListen)
	}
	env, err := rls.FromEnv(func(name string) (string, bool) {
		v, ok := map[string]string{"CONFIG_TYPE": "FILE", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}[name]
		return v, ok
	}, rlsDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if env.Server.AdminListen != "0.0.0.0:8080" {
		t.Errorf("from envoyproxy/ratelimit's environment: got --admin-listen %q, want 0.0.0.0:8080", env.Server.AdminListen)
	}
}
