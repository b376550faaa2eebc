package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplicatedCluster starts masters ≥ 3 masters in cluster mode, each
// with replicas replicas, with extra args for each node (e.g.
// "--cluster-node-timeout", "1000": later args win), joins them with
// redis-cli --cluster create, and waits until every node reports the
// cluster ok and every replica is in sync with its master. Which of the
// Nodes are masters is redis-cli's choice: ask Masters and ReplicaOf.
func StartReplicatedCluster(t testing.TB, masters, replicas int, args ...string) *Cluster {
	t.Helper()
	cli := binary(t, "redis-cli")
	c := &Cluster{}
	n := masters * (1 + replicas)
	addrs := make([]string, n)
	for i := range n {
		s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"}, args...)...)
		c.Nodes = append(c.Nodes, s)
		addrs[i] = s.Addr
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, create...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range c.Nodes {
		for !s.clusterReady() {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok within %s", readyTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if got := len(c.Masters()); got != masters {
		t.Fatalf("redistest: the cluster has %d masters, want %d", got, masters)
	}
	return c
}

// clusterReady reports whether s reports the cluster ok and, if s is a
// replica, is in sync with its master.
func (s *Server) clusterReady() bool {
	ctx := context.Background()
	txt, err := s.Client().ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(txt, "cluster_state:ok") {
		return false
	}
	return s.InSync()
}

// InSync reports whether s is a master, or a replica whose link to its
// master is up and that has loaded its master's data.
func (s *Server) InSync() bool {
	txt, err := s.Client().Info(context.Background(), "replication").Result()
	if err != nil {
		return false
	}
	return strings.Contains(txt, "role:master") ||
		strings.Contains(txt, "master_link_status:up") && strings.Contains(txt, "master_sync_in_progress:0")
}

// Role returns "master" or "slave" (Redis's word), or "" if s does not
// answer.
func (s *Server) Role() string {
	txt, err := s.Client().Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "role:"); ok {
			return v
		}
	}
	return ""
}

// Masters returns the nodes that are masters now.
func (c *Cluster) Masters() []*Server {
	var ms []*Server
	for _, s := range c.Nodes {
		if s.Role() == "master" {
			ms = append(ms, s)
		}
	}
	return ms
}

// ReplicaOf returns a node that replicates master now, nil if none does.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	host, port, _ := net.SplitHostPort(master.Addr)
	for _, s := range c.Nodes {
		if s == master {
			continue
		}
		info := Info(s.t, s.Client(), "replication")
		if info["role"] == "slave" && info["master_host"] == host && info["master_port"] == port {
			return s
		}
	}
	return nil
}

// State returns the cluster_state s reports ("ok", "fail"), or "" if s
// does not answer.
func (s *Server) State() string {
	txt, err := s.Client().ClusterInfo(context.Background()).Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "cluster_state:"); ok {
			return v
		}
	}
	return ""
}

// StartReplica starts a redis-server that replicates master, with extra
// args, and waits until it is in sync.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	s := Start(t, append([]string{"--replicaof", host, port}, args...)...)
	deadline := time.Now().Add(readyTimeout)
	for !s.InSync() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not in sync with %s within %s", s.Addr, master.Addr, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// SentinelConfig configures the Sentinels of StartSentinels.
type SentinelConfig struct {
	// Quorum is the number of Sentinels that must agree the master is
	// down. Default: a majority.
	Quorum int
	// DownAfter is how long the master must not answer to be thought
	// down. Default 5s.
	DownAfter time.Duration
	// FailoverTimeout bounds a failover (and spaces two). Default 3 min,
	// Sentinel's.
	FailoverTimeout time.Duration
}

// StartSentinels starts n Redis Sentinels that watch master under the
// name name, and waits until each knows the others and master's
// replicas (as many as master has now), so that a failover can be voted.
func StartSentinels(t testing.TB, master *Server, name string, n int, cfg SentinelConfig) []*Server {
	t.Helper()
	bin := binary(t, "redis-server")
	host, mport, _ := net.SplitHostPort(master.Addr)
	quorum := cfg.Quorum
	if quorum == 0 {
		quorum = n/2 + 1
	}
	downAfter := cfg.DownAfter
	if downAfter == 0 {
		downAfter = 5 * time.Second
	}
	lines := []string{
		"sentinel monitor " + name + " " + host + " " + mport + " " + strconv.Itoa(quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, downAfter.Milliseconds()),
	}
	if cfg.FailoverTimeout > 0 {
		lines = append(lines, fmt.Sprintf("sentinel failover-timeout %s %d", name, cfg.FailoverTimeout.Milliseconds()))
	}
	var ss []*Server
	for range n {
		ss = append(ss, start(t, bin, func(dir, port string) []string {
			conf := filepath.Join(dir, "sentinel.conf")
			err := os.WriteFile(conf, []byte(strings.Join(append([]string{
				"port " + port, "bind 127.0.0.1", "dir " + dir,
				"logfile " + filepath.Join(dir, "redis.log"),
			}, append(lines, "")...), "\n")), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			return []string{conf, "--sentinel"}
		}))
	}
	replicas := Info(t, master.Client(), "replication")["connected_slaves"]
	deadline := time.Now().Add(3 * readyTimeout)
	for _, s := range ss {
		for {
			m, err := s.Client().Do(context.Background(), "SENTINEL", "MASTER", name).Result()
			if err == nil && field(m, "num-other-sentinels") == strconv.Itoa(n-1) && field(m, "num-slaves") == replicas {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s does not know the others and the replicas within %s: %v %v", s.Addr, 3*readyTimeout, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return ss
}

// field returns the value of key in a SENTINEL MASTER answer: a map in
// RESP3, a flat list of keys and values in RESP2.
func field(v any, key string) string {
	switch m := v.(type) {
	case map[any]any:
		return fmt.Sprint(m[key])
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if fmt.Sprint(m[i]) == key {
				return fmt.Sprint(m[i+1])
			}
		}
	}
	return ""
}
