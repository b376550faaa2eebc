// Package redisstore is the Redis store: a limit.Store whose counters live
// in Redis (one server, Sentinel or Cluster), shared by every gateway that
// uses it, so that limits hold for a fleet as a whole (docs/fleet.md,
// "Redis: one limit for a fleet of gateways").
//
// Its rooms, by file:
//
//   - The store: store.go (Config, New, Close, Stats), allow.go (Allow,
//     in named steps), reset.go, eviction.go.
//   - Transport: nodes.go (the nodes of a cluster, slot moves, warm-up),
//     breaker.go (a circuit breaker per node), batch.go (calls to one
//     node batched into one round trip), log.go (go-redis's log lines).
//   - The decision scripts: redis.lua with the algorithms' Lua chunks
//     (which live beside each algorithm in package limit), assembled in
//     script.go; the calendar argument of a call in calendar.go;
//     budget.lua; lease_return.lua.
//   - Local accelerators, which save calls without changing what is
//     admitted: lease.go and lease_back.go (tokens counted in Redis ahead
//     of requests, and given back unspent), denycache.go (denials
//     remembered until they end), budget.go (the key budget's arguments),
//     fleet.go (fleet membership, for each gateway's local share), and
//     late.go (local admissions written back when Redis answers late).
//   - Concurrency limits: slots.go (Slots, requests in flight).
//
// It decides with the algorithms and semantics of package limit and must
// not change them: a decision of the Redis store is the memory store's on
// Redis's clock. It knows nothing about HTTP. Tests of other packages set
// a fixed decision clock through package redisstoretest (testhook.go), the
// only way to set one: production code must not.
package redisstore
