package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisCrowdedNodes checks the warning the gateway gives at start
// about a database that holds half the key budget already: a node is
// reported once its keys, any program's, reach half of MaxKeys, and never
// without a budget; on a Cluster, each master by its own keys.
func TestRedisCrowdedNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	for i := range 40 {
		if err := c.Set(ctx, "other:"+strconv.Itoa(i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		budget int
		want   int64 // keys reported, 0 for none
	}{{64, 40}, {80, 40}, {81, 0}, {1000, 0}, {-1, 0}} {
		red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 10 * time.Second, MaxKeys: tc.budget})
		got, err := red.CrowdedNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == 0 && len(got) != 0 || tc.want != 0 && (len(got) != 1 || got[srv.Addr] != tc.want) {
			t.Errorf("budget %d: got %v, want %d keys reported for %s", tc.budget, got, tc.want, srv.Addr)
		}
	}

	if testing.Short() {
		return
	}
	cl := redistest.StartCluster(t, 3)
	red := newTestRedis(t, Config{Addrs: cl.Addrs(), Cluster: true, Timeout: 10 * time.Second, MaxKeys: 20})
	// Ten keys on the node of slot {a}'s, none elsewhere.
	owner := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer owner.Close()
	for i := range 10 {
		if err := owner.Set(ctx, "{a}"+strconv.Itoa(i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := red.CrowdedNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("cluster: got %v, want the one master with ten keys", got)
	}
	for node, n := range got {
		if n != 10 {
			t.Errorf("cluster: node %s reported with %d keys, want 10", node, n)
		}
	}
}
