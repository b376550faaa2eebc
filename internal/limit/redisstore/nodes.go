package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/redis/go-redis/v9"
)

// clusterState is the name of the breaker of a Redis Cluster whose slot
// map could not be read (every seed node failed): no node serves any key
// until it is.
const clusterState = "cluster"

// nodes are the circuit breakers of a Redis store, one per Redis node that
// serves keys: the server, the Sentinel's master, or each master of a
// Cluster (by the address that serves the key's slot), so that one failing
// shard leaves the keys of the others decided. The map only grows, and
// only by the masters a cluster has had: it is bounded by the cluster.
// It is safe for concurrent use.
type nodes struct {
	newBreaker func(node string) *breaker
	single     *breaker // the one node of a non-cluster store; nil for a cluster
	singleName string

	mu sync.Mutex
	m  atomic.Pointer[map[string]*breaker] // copy on write: read without the lock
	// open is the number of nodes whose breaker is open.
	open atomic.Int32
	// nextReload is the earliest instant (since the store's epoch) of the
	// next slot map reload; reloads counts those started.
	nextReload, reloads atomic.Int64
}

// slotReloadInterval is the least time between two reloads of a
// cluster's slot map that failing calls ask for: a storm of errors costs
// each Redis node at most a few CLUSTER SLOTS a second per gateway.
const slotReloadInterval = 200 * time.Millisecond

// get returns the breaker of node, creating it closed.
func (ns *nodes) get(node string) *breaker {
	if m := ns.m.Load(); m != nil {
		if b, ok := (*m)[node]; ok {
			return b
		}
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	old := ns.m.Load()
	if old != nil {
		if b, ok := (*old)[node]; ok {
			return b
		}
	}
	m := make(map[string]*breaker, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	b := ns.newBreaker(node)
	m[node] = b
	ns.m.Store(&m)
	return b
}

// probeNow lets the next call to each node through as a probe, whatever
// its breaker's backoff.
func (ns *nodes) probeNow() {
	if ns.single != nil {
		ns.single.probeNow()
		return
	}
	if m := ns.m.Load(); m != nil {
		for _, b := range *m {
			b.probeNow()
		}
	}
}

// NodeCircuit is the state of the circuit breaker of one Redis node.
type NodeCircuit struct {
	// Node is the node's address (a Sentinel's master: "sentinel:" and its
	// name; a cluster whose slot map is unknown: "cluster").
	Node string
	// Open reports whether the breaker is open.
	Open bool
}

// Circuits returns the state of the circuit breaker of every node the
// store has used, sorted by node.
func (r *Store) Circuits() []NodeCircuit {
	var out []NodeCircuit
	if r.nodes.single != nil {
		return []NodeCircuit{{Node: r.nodes.singleName, Open: r.nodes.single.isOpen()}}
	}
	if m := r.nodes.m.Load(); m != nil {
		for n, b := range *m {
			out = append(out, NodeCircuit{Node: n, Open: b.isOpen()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// breakerFor returns the breaker of the node that serves key. In a
// cluster, that is the master of key's slot in the client's slot map;
// reading the map, before it is known, is guarded by the "cluster"
// breaker. An error means the call cannot be made: ErrCircuitOpen, or the
// slot map could not be read (already recorded).
func (r *Store) breakerFor(ctx context.Context, key string) (*breaker, error) {
	if b := r.nodes.single; b != nil {
		return b, nil
	}
	cb := r.nodes.get(clusterState)
	ok, probe := cb.allow()
	if !ok {
		return nil, limit.ErrCircuitOpen
	}
	node, err := r.client.(*redis.ClusterClient).MasterForKey(ctx, key)
	switch {
	case err == nil:
		cb.success()
	case ctx.Err() != nil:
		cb.abandon(probe)
	default:
		cb.failure(probe)
	}
	if err != nil {
		return nil, fmt.Errorf("redis cluster slots: %w", err)
	}
	return r.nodes.get(node.Options().Addr), nil
}

// circuitChanged reports a node's breaker's change to cfg's callbacks,
// and warms the node up again once it is back. It runs with the node's
// breaker's lock held, so that one node's changes come in order.
func (r *Store) circuitChanged(cfg *Config, node string, open bool) {
	if cfg.OnNodeCircuitChange != nil {
		cfg.OnNodeCircuitChange(node, open)
	}
	var first, last bool
	if open {
		first = r.nodes.open.Add(1) == 1
		// In a cluster, a reload of the slot map closes the breaker of a
		// node that no longer serves keys, and asks for the next while a
		// breaker is open (reloadSlots); calls ask for one too, but one
		// that opened the breaker may have been refused by the reloads'
		// rate limit, and the node may be called no more.
		time.AfterFunc(slotReloadInterval, r.reloadSlots)
	} else {
		last = r.nodes.open.Add(-1) == 0
		r.rewarm()
		r.flushWriteBacks()
	}
	if cfg.OnCircuitChange != nil && (first || last) {
		cfg.OnCircuitChange(open)
	}
}

// reloadSlots reloads a cluster's slot map in the background, at most once
// per slotReloadInterval, and closes the breaker of every node that no
// longer serves a slot. A call asks for it when a node failed, timed out,
// refused the key's slot (isSlotRefusal), or has its breaker open: a master may have been
// replaced by its replica (a failover), and go-redis by itself reloads the
// map only on a redirect or once a minute. While a breaker is open it
// asks again itself every slotReloadInterval. Without a cluster it does
// nothing.
func (r *Store) reloadSlots() {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok || r.closed.Load() {
		return
	}
	now := int64(r.now().Sub(r.epoch))
	next := r.nodes.nextReload.Load()
	if now < next || !r.nodes.nextReload.CompareAndSwap(next, now+int64(slotReloadInterval)) {
		return
	}
	r.nodes.reloads.Add(1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.wait.dial+r.wait.timeout)
		defer cancel()
		var mu sync.Mutex
		masters := map[string]bool{}
		// ForEachMaster reloads the map (CLUSTER SLOTS from one node that
		// answers) before it lists the masters; it keeps the old map if
		// no node answers.
		err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			masters[c.Options().Addr] = true
			mu.Unlock()
			return nil
		})
		if err == nil {
			r.nodes.retire(masters)
		}
		// A breaker still open may be a dead master's that the map read
		// still listed, the cluster not having promoted its replica yet
		// everywhere; calls to the other masters succeed and ask for no
		// reload, so look again, as long as one is open (a breaker that
		// opens asks for one too: circuitChanged).
		if r.nodes.open.Load() > 0 {
			time.AfterFunc(slotReloadInterval, r.reloadSlots)
		}
	}()
}

// retire closes the open breaker of every node that is not one of
// masters: it serves no key now (its replica took over its slots), so
// that the store does not report a circuit open for a node it will never
// call again. A node that serves slots again later starts closed.
func (ns *nodes) retire(masters map[string]bool) {
	m := ns.m.Load()
	if m == nil {
		return
	}
	for node, b := range *m {
		if node != clusterState && !masters[node] && b.isOpen() {
			b.success()
		}
	}
}

// Ready makes the store ready to decide without setup work on the request
// path: it dials WarmConns connections to every node that serves keys (the
// master of a Sentinel, each master of a Cluster), and loads the script
// there, so that calls find an open connection and EVALSHA finds the
// script. It retries until ctx is done or DialTimeout has passed, and
// returns the last error then. The server calls it before it serves, and
// the store again in the background after a failover or restart (a lost
// script, a breaker that closes). It is safe to call at any time.
func (r *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.wait.dial)
	defer cancel()
	for {
		err := r.warm(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("redis not ready: %w", err)
		case <-t.C:
		}
	}
}

// warm warms every node that serves keys once.
func (r *Store) warm(ctx context.Context) error {
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return r.warmNode(ctx, n)
		})
	case *redis.Client:
		return r.warmNode(ctx, c)
	}
	return fmt.Errorf("redis: unexpected client %T", r.client)
}

// warmNode takes WarmConns connections of c's pool at once, so that each
// is dialled and set up, returns them to the pool idle, and loads the
// script and the function library (redisFunctions).
func (r *Store) warmNode(ctx context.Context, c *redis.Client) error {
	conns := make([]*redis.Conn, r.warmConns)
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = c.Conn()
		wg.Go(func() { errs[i] = conns[i].Ping(ctx).Err() })
	}
	wg.Wait()
	for _, cn := range conns {
		cn.Close()
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
	}
	if err := c.ScriptLoad(ctx, r.src).Err(); err != nil {
		return fmt.Errorf("%s: loading the script: %w", c.Options().Addr, err)
	}
	if err := r.fn.load(ctx, c); err != nil {
		return fmt.Errorf("%s: %w", c.Options().Addr, err)
	}
	return nil
}

// rewarm runs Ready in the background, unless it runs already or ran less
// than a second ago: after a node came back (its breaker closed) or lost
// the script (a restart, a failover, SCRIPT FLUSH).
func (r *Store) rewarm() {
	now := int64(r.now().Sub(r.epoch))
	last := r.lastWarm.Load()
	if r.closed.Load() || now-last < int64(time.Second) || !r.lastWarm.CompareAndSwap(last, now) {
		return
	}
	go func() {
		// Errors are the breaker's and the calls' to report.
		_ = r.Ready(context.Background())
	}()
}

// isNoScript reports whether err is Redis's NOSCRIPT: the node does not
// have the script (EVALSHA), or the library (FCALL, isNoFunction).
func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT") || isNoFunction(err)
}

// closedConnTries is how many times a call is sent while Redis closes the
// connection it was sent on: CLIENT KILL closes every client's, one after
// the other, and a call sent again at once may take one that Redis is
// about to close.
const closedConnTries = 5

// isClosedConn reports whether err says that Redis closed the connection
// the call was sent on (CLIENT KILL, a timeout of idle clients, a
// restart): the call may go again on another, up to closedConnTries in
// all, with its memo: if Redis had run it before it closed the
// connection, Redis answers what it answered then (memo.go). A call that
// timed out is never sent again (see docs/fleet.md, "When Redis fails").
func isClosedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isRedirect reports whether err is a cluster's MOVED or ASK: the node
// answered that another serves the key's slot.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// isSlotRefusal reports whether err is a cluster node's answer that it
// cannot serve the call's slot now, which is no failure of the node: it
// answered at once, and serves its other slots as before. That is a
// redirect (isRedirect); TRYAGAIN, a call of several keys of a slot being
// migrated (CLUSTER SETSLOT MIGRATING) that are not all on the one node
// (the Redis Cluster specification, on multi-key operations during a
// resharding); or CLUSTERDOWN, the cluster serving no key of the slot
// (its master down and not replaced, the slot assigned to no node, or
// this node cut off from the majority of masters). The call fails to the
// fail mode; the node's breaker does not hear of it, so that the keys of
// the node's other slots are still decided by Redis, and a slot served
// again is used at once, without waiting for a probe (docs/fleet.md,
// "When Redis fails").
func isSlotRefusal(err error) bool {
	return isRedirect(err) || redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "CLUSTERDOWN")
}

// Ping asks Redis whether it is up, within the time to dial and send one
// command, and returns why not. It does not move the circuit breakers.
//
// A Redis Cluster is up while one of its masters answers: it asks every
// master at once (pingMasters), and down lists those that did not answer
// while another did, each as its address and why. Their keys are decided
// by the fail mode meanwhile, while the other masters decide theirs; and
// every gateway shares the cluster, so that counting it down for one
// master would take every gateway out of rotation at once, a partial
// outage made total (docs/operations.md, "Admin port"). One PING sent
// through the cluster client would go to whichever node it picks, and
// answer up or down from one probe to the next.
func (r *Store) Ping(ctx context.Context) (down []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.wait.dial+r.wait.timeout)
	defer cancel()
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		return pingMasters(ctx, cc)
	}
	if err := r.client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis ping: %w", err)
	}
	return nil, nil
}

// pingMasters pings every master of cc at once, within ctx, and returns
// the masters that did not answer, or an error if none did. The masters
// are those of the slot map read again first (CLUSTER SLOTS from one node
// that answers), so that a master replaced by its replica is not asked;
// a node that hangs may hold the read up to its timeout, and the read has
// half of ctx's time, after which go-redis keeps the map it had, and the
// pings the rest.
func pingMasters(ctx context.Context, cc *redis.ClusterClient) (down []string, err error) {
	mapCtx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		mapCtx, cancel = context.WithTimeout(ctx, time.Until(deadline)/2)
		defer cancel()
	}
	var mu sync.Mutex
	var asked, up int
	err = cc.ForEachMaster(mapCtx, func(_ context.Context, c *redis.Client) error {
		err := c.Ping(ctx).Err()
		mu.Lock()
		defer mu.Unlock()
		asked++
		if err != nil {
			down = append(down, c.Options().Addr+": "+err.Error())
		} else {
			up++
		}
		return nil
	})
	sort.Strings(down)
	switch {
	case err != nil:
		// No master was asked: the map could not be read.
		return nil, fmt.Errorf("redis ping: redis cluster slots: %w", err)
	case asked == 0:
		return nil, errors.New("redis ping: the cluster has no master")
	case up == 0:
		return nil, fmt.Errorf("redis ping: no master answered: %s", strings.Join(down, "; "))
	}
	return down, nil
}
