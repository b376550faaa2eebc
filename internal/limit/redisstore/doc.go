// Package redisstore is the Redis store: a limit.Store whose counters live
// in Redis (one server, Sentinel or Cluster), shared by every gateway that
// uses it, so that limits hold for a fleet as a whole (docs/fleet.md,
// "Redis: one limit for a fleet of gateways").
//
// Its rooms, in the order one call meets them, from Store.Allow to Redis
// and back:
//
//   - The store: store.go (Config, New, Close, Stats).
//   - The call: allow.go (Allow: the keys; then the leases, a layer
//     under the call, when its limits may lease; else ask).
//   - Leases: lease_call.go (withLeases: a call takes from the leases
//     of its limits and asks only for what they lack; the tokens Redis
//     grants; a denial while tokens are leased out, which waits for
//     them), lease.go (the tokens counted in Redis ahead of requests),
//     lease_wait.go (a request that waits for another's call for the
//     lease it needs), lease_once.go (no lease for a key's first
//     request).
//   - What leases did not decide: ask.go (ask: the deny cache,
//     denycache.go, else Redis; the script's arguments, scriptArgs, with
//     functions.go's scriptSettings, calendar.go's windows and
//     budget.go's key budget, the strings a rule's calls share kept by
//     reuse.go;
//     decideOnce, which sends the call and reads the reply into the
//     Results; settle, what the answer leaves behind).
//   - Transport: nodes.go (the nodes of a cluster, slot moves, warm-up,
//     the readiness ping),
//     breaker.go (a circuit breaker per node), batch.go (calls to one
//     node batched into one round trip), many.go (a batch as one script
//     call), store.go (run: one script call), memo.go (a call sent again
//     after a closed connection runs once), functions.go (FCALL of the
//     script as a function library, else EVALSHA), log.go (go-redis's
//     log lines).
//   - The script, assembled by script.go in this order (the algorithms'
//     Lua chunks, which live beside each algorithm in package limit, go
//     into redis.lua): budget.lua (the key budget, and the locals every
//     piece uses); redis.lua (the script's contract: its arguments and
//     reply; the helpers, the settings and the state of the call being
//     decided); redis_state.lua (a counter read and written: one string
//     of its fields, or a hash); redis_decide.lua (each limit's key read
//     and decided, then the reservation; a batch's new keys made copies
//     of its first); redis_acts.lua
//     (what each key is written: count and lease, hold, release, charge,
//     lockout; and the reply); redis_entry.lua (one call, a batch, and
//     the library's entry).
//   - Back from Redis: known.go (what Redis last said of each key, for
//     a gateway that decides alone), late.go (an answer that comes too
//     late, and the local admissions and acts it journals), writeback.go
//     (those written back to Redis, each counted once), lease_back.go and
//     lease_return.lua (leased tokens given back unspent).
//   - Beside the call: fleet.go (fleet membership, for each gateway's
//     local share), slots.go (Slots, concurrency limits: requests in
//     flight), reset.go, eviction.go.
//
// It decides with the algorithms and semantics of package limit and must
// not change them: a decision of the Redis store is the memory store's on
// Redis's clock. It knows nothing about HTTP. Tests of other packages set
// a fixed decision clock through package redisstoretest (testhook.go), the
// only way to set one: production code must not.
package redisstore
