package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// counted sends requests for one key of a store from one goroutine, about
// one a millisecond until stop is closed, then as fast as it can until
// Redis denies one, and counts what Redis admitted: with a limit of limit
// on a day's fixed window, admissions beyond limit are counts a failover
// lost.
type counted struct {
	key      string
	lim      int64
	admitted atomic.Int64
	// firstAfter is the first instant Redis decided after the instant
	// given to since (unix nanoseconds, 0 until then).
	since, firstAfter atomic.Int64
	errs              atomic.Int64
	done              chan struct{}
}

func startCounted(t *testing.T, red *Store, key string, lim int64, stop <-chan struct{}) *counted {
	t.Helper()
	c := &counted{key: key, lim: lim, done: make(chan struct{})}
	p := &limit.Params{Algorithm: "fixed_window", Limit: lim, Window: quietWindow(24 * time.Hour)}
	reqs := []limit.Request{{Key: key, Params: p}}
	go func() {
		defer close(c.done)
		res := make([]limit.Result, 1)
		stopped := false
		for {
			if !stopped {
				select {
				case <-stop:
					stopped = true
				default:
					// Paced, so that the limit outlasts the failover.
					time.Sleep(time.Millisecond)
				}
			}
			ok, err := red.Allow(context.Background(), time.Time{}, reqs, res)
			now := time.Now().UnixNano()
			if err != nil {
				c.errs.Add(1)
				continue
			}
			if s := c.since.Load(); s != 0 && c.firstAfter.Load() == 0 {
				c.firstAfter.Store(now)
			}
			if ok {
				c.admitted.Add(1)
			} else if stopped {
				return
			}
		}
	}()
	return c
}

// recovery returns how long after since the key was first decided by
// Redis again, and whether it was.
func (c *counted) recovery() (time.Duration, bool) {
	f := c.firstAfter.Load()
	if f == 0 {
		return 0, false
	}
	return time.Duration(f - c.since.Load()), true
}

// TestRedisClusterFailover kills a master of a 3-master cluster with
// replicas (SIGKILL) under a steady load on keys of every slot range, and
// then fails another over gracefully (CLUSTER FAILOVER on its replica):
//   - the other masters' keys are decided by Redis throughout, without
//     a single error;
//   - the dead master's keys are decided by Redis again once its replica
//     is promoted, because the store reloads the slot map on errors
//     (rate-limited), not go-redis's once a minute (how soon is logged);
//   - a graceful failover loses no count: a key's limit is not exceeded;
//   - the dead master's breaker does not stay open once it serves no slot.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	// A low node timeout makes the cluster fail over within about two
	// seconds; without full coverage the other masters serve on meanwhile.
	cl := redistest.StartReplicatedCluster(t, 3, 1,
		"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
	var circuitOpen atomic.Bool
	red := newTestRedis(t, Config{
		// A generous timeout: a loaded machine must not fail a call to a
		// healthy master.
		Addrs: cl.Addrs(), Cluster: true, Timeout: 5 * time.Second, DialTimeout: 10 * time.Second,
		DenyCacheSize:   -1,
		OnCircuitChange: circuitOpen.Store,
	})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	masters := cl.Masters()
	cc := red.client.(*redis.ClusterClient)
	apps := map[string][]string{} // master → apps whose keys it serves
	for a := 0; len(apps) < 3 || a < 60; a++ {
		app := fmt.Sprintf("app-%d", a)
		node, err := cc.MasterForKey(ctx, redisKey(app, app+"|"))
		if err != nil {
			t.Fatal(err)
		}
		apps[node.Options().Addr] = append(apps[node.Options().Addr], app)
	}
	victim, graceful := masters[0], masters[1]
	victimReplica, gracefulReplica := cl.ReplicaOf(victim), cl.ReplicaOf(graceful)
	if victimReplica == nil || gracefulReplica == nil {
		t.Fatalf("no replica of %s or %s", victim.Addr, graceful.Addr)
	}

	// The steady load: the third master's keys must never fail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var healthyCalls atomic.Int64
	big := &limit.Params{Algorithm: "token_bucket", Limit: 1 << 30, Window: time.Hour}
	healthy := masters[2]
	wg.Go(func() {
		res := make([]limit.Result, 1)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			app := apps[healthy.Addr][i%len(apps[healthy.Addr])]
			if _, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: app + "|/", Params: big}}, res); err != nil {
				t.Errorf("%s on healthy master %s: %v", app, healthy.Addr, err)
				return
			}
			healthyCalls.Add(1)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// A graceful failover: the replica catches up before it takes over, so
	// no count is lost.
	const lim = 3000
	gstop := make(chan struct{})
	gk := startCounted(t, red, apps[graceful.Addr][0]+"|/graceful", lim, gstop)
	eventually.True(t, 30*time.Second, func() bool { return gk.admitted.Load() >= 100 }, "no load on %s", graceful.Addr)
	if err := gracefulReplica.Client().Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER: %v", err)
	}
	eventually.True(t, 30*time.Second, func() bool { return gracefulReplica.Role() == "master" },
		"%s not promoted by CLUSTER FAILOVER", gracefulReplica.Addr)
	gk.since.Store(time.Now().UnixNano())
	close(gstop)
	<-gk.done
	took, _ := gk.recovery()
	if got := gk.admitted.Load(); got > lim {
		t.Errorf("graceful failover: Redis admitted %d on a limit of %d: %d counts lost", got, lim, got-lim)
	}
	t.Logf("graceful failover: admitted %d of %d (a call that failed may have been counted), %d calls failed; decided again %v after the promotion",
		gk.admitted.Load(), lim, gk.errs.Load(), took)

	// A master killed: its replica takes over once the cluster has seen it
	// fail (cluster-node-timeout) and elected it.
	kstop := make(chan struct{})
	kk := startCounted(t, red, apps[victim.Addr][0]+"|/killed", 2000, kstop)
	eventually.True(t, 30*time.Second, func() bool { return kk.admitted.Load() >= 100 }, "no load on %s", victim.Addr)
	reloads := red.nodes.reloads.Load()
	killed := time.Now()
	victim.Stop()
	eventually.True(t, 60*time.Second, func() bool { return victimReplica.Role() == "master" },
		"%s not promoted after its master was killed", victimReplica.Addr)
	promoted := time.Now()
	kk.since.Store(promoted.UnixNano())
	eventually.True(t, 30*time.Second, func() bool { _, ok := kk.recovery(); return ok },
		"the dead master's keys are not decided by its promoted replica")
	took, _ = kk.recovery()
	t.Logf("master killed: replica promoted %v after the kill, keys decided again %v after that; %d slot map reloads meanwhile",
		promoted.Sub(killed), took, red.nodes.reloads.Load()-reloads)
	// How soon is a figure for docs/fleet.md ("Cluster failover"), not a
	// bound a loaded machine must meet; what the test holds the store to
	// is that it reloaded the slot map itself rather than wait for
	// go-redis's own reload, a minute later.
	if red.nodes.reloads.Load() == reloads {
		t.Errorf("the dead master's keys were decided again %v after its replica's promotion with no slot map reload by the store", took)
	}
	close(kstop)
	<-kk.done
	// Kill and failover lose what the replica had not received yet (no
	// WAIT): on loopback, usually nothing.
	t.Logf("master killed: Redis admitted %d on a limit of 2000 (%d counts lost)", kk.admitted.Load(), max(kk.admitted.Load()-2000, 0))
	// The rate limit on reloads: at most one per slotReloadInterval.
	if n, most := red.nodes.reloads.Load()-reloads, int64(time.Since(killed)/slotReloadInterval)+1; n > most {
		t.Errorf("slot map reloads: got %d in %v, want at most %d", n, time.Since(killed), most)
	}
	eventually.True(t, 10*time.Second, func() bool { return !circuitOpen.Load() && !red.CircuitOpen() },
		"a circuit is still reported open after the failover: %v", red.Circuits())
	if healthyCalls.Load() == 0 {
		t.Errorf("no calls on the healthy master")
	}
}

// TestRedisSentinelFailover kills the master that three Sentinels watch:
// the store follows the replica they promote and decides again (how soon
// after the failover is logged: a figure, not a bound a loaded machine
// must meet).
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, master, "gw-failover", 3, redistest.SentinelConfig{
		Quorum: 2, DownAfter: time.Second, FailoverTimeout: 5 * time.Second,
	})
	red := newTestRedis(t, Config{
		Addrs: []string{sentinels[0].Addr, sentinels[1].Addr, sentinels[2].Addr}, SentinelMaster: "gw-failover",
		Timeout: time.Second, DialTimeout: 10 * time.Second, DenyCacheSize: -1,
	})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const lim = 2000
	stop := make(chan struct{})
	k := startCounted(t, red, "sentinel|/failover", lim, stop)
	eventually.True(t, 30*time.Second, func() bool { return k.admitted.Load() >= 100 }, "no load")
	killed := time.Now()
	master.Stop()
	eventually.True(t, 60*time.Second, func() bool {
		a, err := sentinels[0].Client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "gw-failover").StringSlice()
		return err == nil && len(a) == 2 && a[0]+":"+a[1] == replica.Addr
	}, "the Sentinels did not promote %s", replica.Addr)
	promoted := time.Now()
	k.since.Store(promoted.UnixNano())
	eventually.True(t, 30*time.Second, func() bool { _, ok := k.recovery(); return ok },
		"the store does not decide on the promoted replica")
	took, _ := k.recovery()
	close(stop)
	<-k.done
	t.Logf("Sentinel failover %v after the kill, decided again %v after that; Redis admitted %d on a limit of %d (%d counts lost)",
		promoted.Sub(killed), took, k.admitted.Load(), lim, max(k.admitted.Load()-lim, 0))
	if n, err := replica.Client().Exists(ctx, "gw:{sentinel}:/failover").Result(); err != nil || n != 1 {
		t.Errorf("the counter on the promoted replica: got %d %v, want it there", n, err)
	}
}

// TestRedisClientKill kills the store's connections (CLIENT KILL TYPE
// normal, as an operator or a proxy in front of Redis may) again and
// again under a concurrent load: no call fails, since a call that finds
// its connection closed by Redis is sent once more on a new one.
func TestRedisClientKill(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second, DenyCacheSize: -1})
	ctx := context.Background()
	if err := red.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "token_bucket", Limit: 1 << 30, Window: time.Hour}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			reqs := []limit.Request{{Key: fmt.Sprintf("kill-%d|/", w), Params: p}}
			res := make([]limit.Result, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				if _, err := red.Allow(ctx, time.Time{}, reqs, res); err != nil {
					if failed.Add(1) <= 3 {
						t.Errorf("a call while connections are killed: %v", err)
					}
				}
			}
		})
	}
	killed := int64(0)
	for range 20 {
		before := calls.Load()
		eventually.True(t, 10*time.Second, func() bool { return calls.Load() >= before+500 }, "no calls")
		n, err := srv.Client().ClientKillByFilter(ctx, "TYPE", "normal").Result()
		if err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	close(stop)
	wg.Wait()
	t.Logf("%d connections killed under %d calls: %d failed", killed, calls.Load(), failed.Load())
}
