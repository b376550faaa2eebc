package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestEndToEndRedis runs two gateway binaries on one Redis that is down
// when they start: with --fail-mode closed they answer 503 and are not
// ready, then use Redis once it comes, and together admit each limit once.
func TestEndToEndRedis(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	srv := redistest.Start(t)
	srv.Stop()

	// A generous --redis-timeout: fail closed, a call that misses the
	// default 25ms on a loaded machine is answered 503.
	env := []string{"GATEWAY_UPSTREAM=" + up.URL, "GATEWAY_STORE=redis", "GATEWAY_REDIS_URL=" + srv.URL()}
	a := startGateway(t, env, "--fail-mode", "closed", "--redis-timeout", "5s", "--config", "configs/demo-rules.yaml")
	b := startGateway(t, env, "--fail-mode", "closed", "--redis-timeout", "5s", "--config", "configs/demo-rules.yaml")

	if code, body := send(t, "GET", a.proxy+"/v1/user/42/orders", "X-App-Id", "app-1"); code != 503 || !strings.Contains(body, `"error":"limiter_unavailable"`) {
		t.Errorf("Redis down, fail closed: got %d %s, want 503 limiter_unavailable", code, body)
	}
	if code, body := send(t, "GET", a.admin+"/readyz"); code != 503 || !strings.Contains(body, `"reachable":false`) {
		t.Errorf("readyz with Redis down, fail closed: got %d %s, want 503", code, body)
	}
	if !strings.Contains(a.logs.String(), "redis unreachable at start") {
		t.Errorf("no warning about Redis at start in the logs:\n%s", a.logs)
	}

	srv.Restart()
	for _, g := range []*running{a, b} {
		eventually.True(t, 15*time.Second, func() bool {
			code, _ := send(t, "GET", g.admin+"/readyz")
			return code == 200
		}, "readyz never 200 after Redis came back\n%s", g.logs)
	}
	eventually.True(t, 15*time.Second, func() bool {
		return strings.Contains(a.logs.String(), "redis reachable again")
	}, "no log that Redis is reachable again\n%s", a.logs)
	// The breaker may still be open for its backoff: wait for a decision.
	eventually.True(t, 15*time.Second, func() bool {
		code, _ := send(t, "GET", a.proxy+"/v1/user/1", "X-App-Id", "app-3")
		return code == 200
	}, "no request admitted after Redis came back\n%s", a.logs)

	// app-1 may GET /v1/user/{id}/orders 10 times a minute, across both
	// gateways.
	n1, _ := countAdmitted(t, 8, a.proxy+"/v1/user/42/orders", "X-App-Id", "app-1")
	n2, _ := countAdmitted(t, 8, b.proxy+"/v1/user/42/orders", "X-App-Id", "app-1")
	if n1+n2 != 10 {
		t.Errorf("two gateways admitted %d + %d, want 10 in all", n1, n2)
	}
	if code, metrics := send(t, "GET", a.admin+"/metrics"); code != 200 ||
		!strings.Contains(metrics, `gateway_store_errors_total{store="redis"}`) ||
		!strings.Contains(metrics, "gateway_store_circuit_open 0") {
		t.Errorf("metrics: got %d, want the store's errors and a closed circuit", code)
	}
}

// TestEndToEndRedisFull runs a gateway with --fail-mode closed on a Redis
// at maxmemory with noeviction: Redis refuses the script (OOM), and every
// request is refused with 503, never admitted, an unknown caller's too
// (whose new counter the key budget has room for); a gateway on a Redis that
// can evict counters warns at start.
func TestEndToEndRedisFull(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	if err := srv.Client().Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client().ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	env := []string{"GATEWAY_UPSTREAM=" + up.URL, "GATEWAY_STORE=redis", "GATEWAY_REDIS_URL=" + srv.URL()}
	g := startGateway(t, env, "--fail-mode", "closed", "--redis-timeout", "1s", "--redis-max-keys", "64", "--config", "configs/demo-rules.yaml")
	for i := range 20 {
		if code, body := send(t, "GET", g.proxy+"/v1/user/1", "X-App-Id", "app-3"); code != 503 || !strings.Contains(body, "limiter_unavailable") {
			t.Fatalf("request %d on a full Redis, fail closed: got %d %s, want 503 limiter_unavailable", i, code, body)
		}
		if code, body := send(t, "GET", g.proxy+"/v1/user/1"); code != 503 || !strings.Contains(body, "limiter_unavailable") {
			t.Fatalf("unknown caller's request %d on a full Redis, fail closed: got %d %s, want 503 limiter_unavailable", i, code, body)
		}
	}
	if strings.Contains(g.logs.String(), "maxmemory-policy can evict") {
		t.Errorf("eviction warning with noeviction:\n%s", g.logs)
	}

	lru := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	env = []string{"GATEWAY_UPSTREAM=" + up.URL, "GATEWAY_STORE=redis", "GATEWAY_REDIS_URL=" + lru.URL()}
	g2 := startGateway(t, env, "--config", "configs/demo-rules.yaml")
	eventually.True(t, 15*time.Second, func() bool {
		return strings.Contains(g2.logs.String(), "maxmemory-policy can evict")
	}, "no eviction warning with allkeys-lru:\n%s", g2.logs)
}

// TestEndToEndRedisCrowded checks the warning at start about a Redis
// database that holds half the key budget already (docs/fleet.md, "Key
// budget"): with 40 keys of another program and --redis-max-keys 64 the
// gateway warns; with the default budget it does not.
func TestEndToEndRedisCrowded(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	srv := redistest.Start(t)
	ctx := context.Background()
	for i := range 40 {
		if err := srv.Client().Set(ctx, fmt.Sprintf("session:%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GATEWAY_UPSTREAM=" + up.URL, "GATEWAY_STORE=redis", "GATEWAY_REDIS_URL=" + srv.URL()}
	const warning = "redis database holds half the key budget or more already"
	crowded := startGateway(t, env, "--redis-max-keys", "64", "--config", "configs/demo-rules.yaml")
	eventually.True(t, 15*time.Second, func() bool {
		return strings.Contains(crowded.logs.String(), warning)
	}, "no warning with 40 keys and a budget of 64:\n%s", crowded.logs)
	if !strings.Contains(crowded.logs.String(), `"keys":40,`) {
		t.Errorf("the warning does not give the node's 40 keys:\n%s", crowded.logs)
	}

	roomy := startGateway(t, env, "--config", "configs/demo-rules.yaml")
	eventually.True(t, 15*time.Second, func() bool {
		return strings.Contains(roomy.logs.String(), "redis ready")
	}, "the gateway with the default budget is not ready:\n%s", roomy.logs)
	if strings.Contains(roomy.logs.String(), warning) {
		t.Errorf("a warning with 40 keys and the default budget:\n%s", roomy.logs)
	}
}
