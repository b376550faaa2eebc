package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	"github.com/ratelimit-gateway/gateway/internal/xdstest"
)

// egRateLimitConfig is a RateLimitConfig as Envoy Gateway's translator
// writes one for a BackendTrafficPolicy with a global limit per
// x-user-id header: a descriptor of the rule, under it the header's.
// The test counts in day windows, which from the environment end at
// midnight UTC; it runs the counting again when one passes meanwhile.
func egRateLimitConfig(name string, rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "rule-0-match-0", Value: "rule-0-match-0",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "rule-0-match-1",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu},
		}},
	}}}
}

// TestRLSEnvoyGatewayXDS runs the binary as Envoy Gateway runs
// envoyproxy/ratelimit: named /bin/ratelimit (here a symlink), no flags,
// Envoy Gateway's environment (envoyproxy/gateway
// internal/infrastructure/kubernetes/ratelimit/resource.go) with its
// certificate files, its config only over ADS from a go-control-plane
// server with mutual TLS that pushes snapshots as Envoy Gateway's runner
// does. Only the listening ports (free ones, not 8080 and 8081 on a
// shared machine) and the reconnect backoff are the test's. The service
// applies the snapshots, keeps its counters across a push, NACKs a bad
// one keeping the last good, and answers /healthcheck, Prometheus on
// PROMETHEUS_ADDR, /rlconfig and gRPC reflection.
func TestRLSEnvoyGatewayXDS(t *testing.T) {
	t.Parallel()
	gatewayCmd(t, context.Background()) // skips under -short
	redis := redistest.Start(t)
	cert := tlstest.New(t, 37)
	certs := t.TempDir()
	for name, body := range map[string][]byte{"tls.crt": cert.CertPEM, "tls.key": cert.KeyPEM, "ca.crt": cert.CertPEM} {
		if err := os.WriteFile(filepath.Join(certs, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srvTLS, _ := xdstest.MutualTLS(cert)
	xds := xdstest.Start(t, srvTLS)
	_, port, _ := strings.Cut(xds.Addr, ":")

	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{
		raceEnv,
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redis.Addr,
		"RUNTIME_ROOT=/data",
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=localhost:" + port,
		"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + filepath.Join(certs, "tls.crt"),
		"GRPC_SERVER_TLS_KEY=" + filepath.Join(certs, "tls.key"),
		"GRPC_SERVER_TLS_CA_CERT=" + filepath.Join(certs, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + filepath.Join(certs, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + filepath.Join(certs, "tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + filepath.Join(certs, "ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"USE_PROMETHEUS=true",
		// The test's: free ports on loopback, a quick reconnect.
		"PROMETHEUS_ADDR=127.0.0.1:0",
		"HOST=127.0.0.1", "PORT=0",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms",
	}
	addrs, logs := startLogged(t, cmd)

	pool := x509.NewCertPool()
	pool.AddCert(cert.Cert)
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(domain, user string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "rule-0-match-0", Value: "rule-0-match-0"}, {Key: "rule-0-match-1", Value: user},
		}}
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, logs)
		}
		return resp
	}
	// check notes in *failed a step whose answer is not code and
	// remaining.
	check := func(failed *[]string, step string, resp *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code, remaining uint32) {
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != code || st.GetLimitRemaining() != remaining {
			*failed = append(*failed, fmt.Sprintf("%s: got %v remaining %d, want %v remaining %d", step, resp.GetOverallCode(), st.GetLimitRemaining(), code, remaining))
		}
	}

	// Forced to start without a config: every domain is unknown, OK.
	var failed []string
	check(&failed, "before any config", ask("eg", "alice"), rlsv3.RateLimitResponse_OK, 0)
	for _, f := range failed {
		t.Error(f)
	}

	// From the environment the service counts in fixed windows: a day's
	// ends at midnight UTC. When one passes while the counting runs, it
	// runs again, with versions and a caller of its own.
	for attempt := 0; ; attempt++ {
		if attempt == 3 {
			t.Fatal("midnight UTC passed in each of three attempts")
		}
		version := func(n int) string { return fmt.Sprintf("%d.%d", attempt, n) }
		user := fmt.Sprintf("alice-%d", attempt)
		day := time.Now().Unix() / 86400
		failed = nil

		xds.Push(t, "envoy-ratelimit", version(1), egRateLimitConfig("eg", 3, rlsconfv3.RateLimitUnit_DAY))
		first := xds.WaitRequest(t, time.Minute, "ACK of version "+version(1), xdstest.Acked(version(1)))
		if first.GetTypeUrl() != "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig" {
			t.Errorf("type: got %s", first.GetTypeUrl())
		}
		check(&failed, "v1, first", ask("eg", user), rlsv3.RateLimitResponse_OK, 2)
		check(&failed, "v1, second", ask("eg", user), rlsv3.RateLimitResponse_OK, 1)

		// A push that keeps the descriptor keeps its count.
		xds.Push(t, "envoy-ratelimit", version(2), egRateLimitConfig("eg", 3, rlsconfv3.RateLimitUnit_DAY), egRateLimitConfig("other", 1, rlsconfv3.RateLimitUnit_DAY))
		xds.WaitRequest(t, time.Minute, "ACK of version "+version(2), xdstest.Acked(version(2)))
		check(&failed, "v2, third", ask("eg", user), rlsv3.RateLimitResponse_OK, 0)
		check(&failed, "v2, fourth", ask("eg", user), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
		check(&failed, "v2, other domain", ask("other", user), rlsv3.RateLimitResponse_OK, 0)

		// A bad push is NACKed with its error; version 2 stays in force.
		xds.Push(t, "envoy-ratelimit", version(3), egRateLimitConfig("eg", 3, rlsconfv3.RateLimitUnit_UNKNOWN))
		nack := xds.WaitRequest(t, time.Minute, "NACK of version "+version(3), func(r *discoveryv3.DiscoveryRequest) bool {
			return xdstest.Nacked(version(2))(r) && r.GetResponseNonce() != first.GetResponseNonce()
		})
		if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "invalid rate limit unit") {
			t.Errorf("NACK: got %q, want the config error", msg)
		}
		check(&failed, "after the NACK, other domain", ask("other", user), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
		if time.Now().Unix()/86400 == day {
			break
		}
		t.Logf("midnight UTC passed while counting (%d differences): again", len(failed))
	}
	for _, f := range failed {
		t.Error(f)
	}

	for _, tc := range []struct{ name, url, want string }{
		{"healthcheck", "http://" + addrs["admin"] + "/healthcheck", "OK"},
		{"prometheus", "http://" + addrs["metrics"] + "/metrics", "gateway_build_info"},
		{"rlconfig", "http://" + addrs["debug"] + "/rlconfig", "eg.rule-0-match-0_rule-0-match-0.rule-0-match-1: unit=DAY requests_per_unit=3"},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: got %d %.200q, want 200 with %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}

	// grpcurl lists the services by reflection.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection: got services %v, want RateLimitService among them", names)
	}
}

// startLogged starts cmd, a `gateway rls` logging in text, and returns
// the addresses of its "gateway rls listening" log line by name (grpc,
// admin, debug, metrics) and its log so far.
func startLogged(t *testing.T, cmd *exec.Cmd) (map[string]string, *gwtest.Log) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &gwtest.Log{}
	done := make(chan error, 1)
	ready := make(chan map[string]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			if strings.Contains(line, `msg="gateway rls listening"`) {
				m := map[string]string{}
				for _, f := range strings.Fields(line) {
					if k, v, ok := strings.Cut(f, "="); ok {
						m[k] = v
					}
				}
				ready <- m
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	select {
	case m := <-ready:
		return m, logs
	case err := <-done:
		t.Fatalf("ratelimit exited before listening: %v\n%s", err, logs)
	case <-time.After(time.Minute):
		t.Fatalf("ratelimit did not listen within a minute\n%s", logs)
	}
	return nil, nil
}
