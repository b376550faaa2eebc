package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// fleetState is the store's part in the fleet's membership: its id, how
// often it beats, the fleet's size as the last heartbeat saw it, and the
// heartbeats that succeeded.
type fleetState struct {
	id        string
	heartbeat time.Duration
	size      atomic.Int64
	beats     atomic.Int64
}

// DefaultFleetHeartbeat is the default Config.FleetHeartbeat.
const DefaultFleetHeartbeat = 2 * time.Second

// fleetKey is the sorted set of the gateways that use a Redis: each
// member is a gateway's ID, scored with the instant (ms, Redis's clock)
// its membership lapses. One key in one slot, so that one call refreshes a
// membership and counts the fleet, in a Cluster too.
const fleetKey = "gw:{fleet}:members"

// fleetLua refreshes ARGV[1]'s membership for ARGV[2] ms, drops the lapsed
// ones and returns the number of members. A lapse is a score, not a key's
// TTL, so that counting needs no SCAN over a cluster's nodes.
const fleetLua = `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
`

var fleetScript = redis.NewScript(fleetLua)

// newFleetID returns a gateway ID unique to this process: the host name,
// the process ID and random bits (a restarted process is a new member;
// the old one lapses).
func newFleetID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// FleetID returns the ID this gateway registers under.
func (r *Store) FleetID() string { return r.fleet.id }

// FleetSize returns the number of gateways that used this Redis at the
// last heartbeat, this one included; 0 before any heartbeat succeeded.
// Through an outage it stays what it was last seen.
func (r *Store) FleetSize() int { return int(r.fleet.size.Load()) }

// FleetSeen reports whether this gateway has seen the whole fleet: its
// second heartbeat succeeded, so that every gateway that registered
// before its first one was counted. At the first, the gateways that
// start at the same moment have not all registered yet, and each may
// find itself alone.
func (r *Store) FleetSeen() bool { return r.fleet.beats.Load() >= 2 }

// Heartbeat registers this gateway as a member of the fleet for three
// heartbeats and counts the members. It returns the fleet size.
func (r *Store) Heartbeat(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.wait.call)
	defer cancel()
	ttl := 3 * r.fleet.heartbeat
	n, err := fleetScript.Run(ctx, r.client, []string{fleetKey}, r.fleet.id, ttl.Milliseconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("redis fleet heartbeat: %w", err)
	}
	r.fleet.size.Store(n)
	r.fleet.beats.Add(1)
	return int(n), nil
}

// RunFleet keeps this gateway a member of the fleet until ctx is done: a
// heartbeat every Config.FleetHeartbeat, then it leaves. onSize, if
// not nil, is called with the fleet size after every heartbeat that
// changed it.
func (r *Store) RunFleet(ctx context.Context, onSize func(n int)) {
	t := time.NewTicker(r.fleet.heartbeat)
	defer t.Stop()
	last := -1
	for {
		if n, err := r.Heartbeat(ctx); err == nil && n != last {
			last = n
			if onSize != nil {
				onSize(n)
			}
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
			r.client.ZRem(lctx, fleetKey, r.fleet.id)
			cancel()
			return
		case <-t.C:
		}
	}
}
