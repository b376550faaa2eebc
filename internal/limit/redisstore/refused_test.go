package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisClusterSlotRefused makes one master of a 3-master cluster
// refuse the calls of one slot, as a resharding or a partial outage does,
// and checks that each such call fails (to the fail mode) with Redis's
// answer, while the node's breaker does not open: a key of another slot
// of the same master is decided by Redis right after.
//   - TRYAGAIN: the slot is migrating (CLUSTER SETSLOT MIGRATING on the
//     master, IMPORTING on another) and a call names a counter the
//     master holds and one it does not (a new key of the same app).
//   - CLUSTERDOWN: the master serves the slot no more (CLUSTER DELSLOTS
//     there), and the cluster, without full coverage, serves on.
func TestRedisClusterSlotRefused(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	var opened atomic.Int32
	red := newTestRedis(t, Config{
		// A generous timeout: a loaded machine must not fail a call to a
		// healthy master.
		Addrs: cl.Addrs(), Cluster: true, Timeout: 5 * time.Second, DialTimeout: 10 * time.Second,
		DenyCacheSize: -1, Leases: -1,
		OnNodeCircuitChange: func(node string, open bool) {
			if open {
				opened.Add(1)
			}
		},
	})
	redistest.Ready(t, red)
	ctx := context.Background()
	cc := red.client.(*redis.ClusterClient)

	// Three apps whose keys one master serves, each in a slot of its own.
	type app struct {
		name string
		slot int64
	}
	byMaster := map[string][]app{}
	var owner string
	for a := 0; owner == ""; a++ {
		if a == 1000 {
			t.Fatal("no master serves three apps of 1000")
		}
		name := fmt.Sprintf("app-%d", a)
		key := redisKey(name, name+"|a")
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		dup := false
		for _, o := range byMaster[addr] {
			dup = dup || o.slot == slot
		}
		if !dup {
			byMaster[addr] = append(byMaster[addr], app{name: name, slot: slot})
		}
		if len(byMaster[addr]) == 3 {
			owner = addr
		}
	}
	apps := byMaster[owner]
	var src, dst *redistest.Server
	for _, s := range cl.Nodes {
		if s.Addr == owner {
			src = s
		} else {
			dst = s
		}
	}
	nodeID := func(s *redistest.Server) string {
		id, err := s.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", s.Addr, err)
		}
		return id
	}

	p := &limit.Params{Algorithm: "fixed_window", Limit: 1 << 30, Window: time.Hour}
	allow := func(keys ...string) error {
		reqs := make([]limit.Request, len(keys))
		for i, k := range keys {
			reqs[i] = limit.Request{Key: k, Params: p}
		}
		_, err := red.Allow(ctx, time.Time{}, reqs, make([]limit.Result, len(reqs)))
		return err
	}
	other := apps[2].name + "|a"
	tests := []struct {
		name string
		app  string
		// refuse makes the master refuse the calls of the app's slot.
		refuse func(slot int64)
		want   string
	}{
		{
			name: "TRYAGAIN", app: apps[0].name, want: "TRYAGAIN",
			refuse: func(slot int64) {
				if err := dst.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", nodeID(src)).Err(); err != nil {
					t.Fatalf("CLUSTER SETSLOT IMPORTING: %v", err)
				}
				if err := src.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", nodeID(dst)).Err(); err != nil {
					t.Fatalf("CLUSTER SETSLOT MIGRATING: %v", err)
				}
			},
		},
		{
			name: "CLUSTERDOWN", app: apps[1].name, want: "CLUSTERDOWN",
			refuse: func(slot int64) {
				if err := src.Client().Do(ctx, "CLUSTER", "DELSLOTS", slot).Err(); err != nil {
					t.Fatalf("CLUSTER DELSLOTS: %v", err)
				}
			},
		},
	}
	for i, tt := range tests {
		known, fresh := tt.app+"|a", tt.app+"|new"
		// The counter exists on the master before its slot is refused.
		if err := allow(known); err != nil {
			t.Fatalf("%s: before: %v", tt.name, err)
		}
		tt.refuse(apps[i].slot)
		for n := range 2 * DefaultBreakerThreshold {
			err := allow(known, fresh)
			if err == nil || errors.Is(err, limit.ErrCircuitOpen) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%s: call %d of the refused slot: got %v, want Redis's %s", tt.name, n+1, err, tt.want)
			}
		}
		if err := allow(other); err != nil {
			t.Errorf("%s: a key of another slot of the same master: got %v, want decided by Redis", tt.name, err)
		}
		if n := opened.Load(); n != 0 {
			t.Errorf("%s: a node's breaker opened %d times, want never", tt.name, n)
		}
		for _, c := range red.Circuits() {
			if c.Open {
				t.Errorf("%s: the breaker of %s is open", tt.name, c.Node)
			}
		}
	}
}
