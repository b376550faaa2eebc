package rlsxds_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-gateway/gateway/internal/rlsxds"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
	"github.com/ratelimit-gateway/gateway/internal/xdstest"
)

// wait is a generous bound for a test on a loaded machine.
const wait = 30 * time.Second

func config(domain string, rpu uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
}

// applied records what Apply was given, refusing any config of a domain
// named "bad".
type applied struct {
	mu       sync.Mutex
	versions []string
	domains  [][]string
}

func (a *applied) apply(version string, rs []*rlsconfv3.RateLimitConfig) error {
	var ds []string
	for _, r := range rs {
		if r.GetDomain() == "bad" {
			return errors.New("domain bad is refused")
		}
		ds = append(ds, r.GetDomain())
	}
	slices.Sort(ds) // a snapshot's resources come in no set order
	a.mu.Lock()
	defer a.mu.Unlock()
	a.versions = append(a.versions, version)
	a.domains = append(a.domains, ds)
	return nil
}

func (a *applied) last() (string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.versions) == 0 {
		return "", nil
	}
	return a.versions[len(a.versions)-1], a.domains[len(a.domains)-1]
}

// TestClientMutualTLS subscribes over mutual TLS with its node ID, ACKs
// the snapshots it applies, NACKs one Apply refuses with the error while
// keeping the version in force, and comes back after the server restarts.
func TestClientMutualTLS(t *testing.T) {
	t.Parallel()
	srvTLS, cliTLS := xdstest.MutualTLS(tlstest.New(t, 1))
	srv := xdstest.Start(t, srvTLS)
	var a applied
	c, err := rlsxds.New(rlsxds.Config{
		ServerURL: srv.Addr, NodeID: "envoy-ratelimit", NodeMetadata: map[string]string{"zone": "a"},
		TLS: cliTLS, Apply: a.apply, BackoffInitial: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	first := srv.WaitRequest(t, wait, "subscription", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetNode() != nil })
	if first.GetNode().GetId() != "envoy-ratelimit" || first.GetTypeUrl() != rlsxds.TypeURL {
		t.Errorf("first request: node %q type %q, want envoy-ratelimit and %s", first.GetNode().GetId(), first.GetTypeUrl(), rlsxds.TypeURL)
	}
	if got := first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); got != "a" {
		t.Errorf("node metadata zone: got %q, want a", got)
	}

	srv.Push(t, "envoy-ratelimit", "1", config("one", 5), config("two", 7))
	srv.WaitRequest(t, wait, "ACK of version 1", xdstest.Acked("1"))
	if v, ds := a.last(); v != "1" || strings.Join(ds, ",") != "one,two" {
		t.Errorf("applied: got version %q domains %v, want 1 and [one two]", v, ds)
	}

	srv.Push(t, "envoy-ratelimit", "2", config("one", 5), config("bad", 1))
	nack := srv.WaitRequest(t, wait, "NACK of version 2", xdstest.Nacked("1"))
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "domain bad is refused") {
		t.Errorf("NACK message: got %q, want Apply's error", msg)
	}
	if v, _ := a.last(); v != "1" {
		t.Errorf("after the NACK: got version %q applied last, want 1", v)
	}

	srv.Push(t, "envoy-ratelimit", "3", config("three", 1))
	srv.WaitRequest(t, wait, "ACK of version 3", xdstest.Acked("3"))
	if v, ds := a.last(); v != "3" || strings.Join(ds, ",") != "three" {
		t.Errorf("applied: got version %q domains %v, want 3 and [three]", v, ds)
	}
}

// TestClientReconnects finds the server again after it went away: a new
// server on the same address pushes a snapshot that the client applies.
func TestClientReconnects(t *testing.T) {
	t.Parallel()
	srv := xdstest.Start(t, nil)
	var a applied
	c, err := rlsxds.New(rlsxds.Config{ServerURL: srv.Addr, NodeID: "n", Apply: a.apply, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	srv.Push(t, "n", "1", config("one", 1))
	srv.WaitRequest(t, wait, "ACK of version 1", xdstest.Acked("1"))
	addr := srv.Addr
	srv.Stop()
	srv2 := xdstest.StartAt(t, nil, addr)
	srv2.Push(t, "n", "2", config("two", 1))
	// On reconnecting, the client names the version it holds.
	srv2.WaitRequest(t, wait, "resubscription at version 1", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() == "" && r.GetVersionInfo() == "1"
	})
	srv2.WaitRequest(t, wait, "ACK of version 2", xdstest.Acked("2"))
	if v, ds := a.last(); v != "2" || strings.Join(ds, ",") != "two" {
		t.Errorf("applied: got version %q domains %v, want 2 and [two]", v, ds)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	apply := func(string, []*rlsconfv3.RateLimitConfig) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  rlsxds.Config
		want string
	}{
		{"no url", rlsxds.Config{NodeID: "n", Apply: apply}, "server URL is empty"},
		{"no node", rlsxds.Config{ServerURL: "localhost:1", Apply: apply}, "node ID is empty"},
		{"no apply", rlsxds.Config{ServerURL: "localhost:1", NodeID: "n"}, "Apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rlsxds.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want …%s…", err, tc.want)
			}
		})
	}
}
