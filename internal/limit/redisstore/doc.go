// Package redisstore is the Redis store: a limit.Store whose counters live
// in Redis (one server, Sentinel or Cluster), shared by every gateway that
// uses it, so that limits hold for a fleet as a whole (docs/fleet.md,
// "Redis: one limit for a fleet of gateways").
//
// Its rooms, in the order one call meets them, from Store.Allow to Redis
// and back. A step may call a small helper of a room it passed (the
// store's clock, in allow.go; a key's tag); where a later step hands work
// back to an earlier room, the room says so.
//
//   - The call: allow.go (Allow: the keys and their tag; then "take
//     from the leases, else ask", and, once the answer is back, a
//     denial Redis made remembered in the deny cache, remember, which
//     the leases call before they end; unless other gateways' leased
//     tokens may come back, mayComeBack, which ask asks too).
//   - Leases: lease.go, one room, a layer under the call (tokens counted
//     in Redis ahead of requests). A call whose limits may lease
//     (leasable) enters at withLeases and reads down the file: take
//     from the leases, waiting for another request's call for the same
//     lease (fromLeases, takeWaiting, take; no lease for a key's first
//     request, leaseOnce; the tokens of an ended bucket or a reloaded
//     limit taken away, drop); else spend what some have (spendSome)
//     and ask (ask.go) for the rest and the leases' next tokens; when
//     ask returns, keep what Redis granted (granted, grant, unspent),
//     and end (finish: tokens put back for a request not admitted).
//     Below that, what runs beside the calls: the next lease asked for
//     in the background (refill, which asks as a call does), and
//     tokens given back to Redis unspent (idleCheck, close, async,
//     leasedLate; giveBack, with lease_return.lua).
//   - What leases did not decide: ask.go (ask: the deny cache,
//     denycache.go, else Redis: the script's arguments, scriptArgs, from
//     reuse.go's shared strings, functions.go's scriptSettings,
//     calendar.go's windows and budget.go's key budget; decideOnce, which
//     sends the call under its memo (memo.go: a call Redis ran runs once,
//     however often it is sent) and reads the reply into the Results;
//     waitForTokens, a denial while other gateways' leased tokens may
//     come back, asked again; known.go's record of what each key holds).
//     ask returns Redis's answer to its caller and hands nothing to the
//     leases (it reads what the call asks of them, leaseAsk, and their
//     idle time).
//   - Transport: breaker.go (a circuit breaker per node; nodes.go picks
//     a Cluster's node, and keeps its slot moves, warm-up and the
//     readiness ping), batch.go (the calls to one node batched into one
//     round trip, and each caller's wait, rtt.go's), then one of many.go
//     (a batch as one FCALL), batch.go's runBatch (a pipeline of a
//     script call each: on a Cluster, by EVALSHA, or with a call sent
//     again) or store.go's runOnce (a call alone), the last two through
//     functions.go's scriptCmd (FCALL of the script as a function
//     library, else EVALSHA); log.go (go-redis's log lines).
//   - The script. A call enters at redis_entry.lua (one call, a batch,
//     and the library's entry), which calls into the files before it:
//     a Lua local is seen only below its definition, so script.go
//     assembles the files so that each uses only what those before it
//     define, the entry last: budget.lua (the key budget,
//     and the locals every piece uses); redis.lua (the script's
//     contract: its arguments and reply; the helpers, the settings and
//     the state of the call being decided; and, at its placeholder, the
//     algorithms' chunks, which live beside each algorithm in package
//     limit, each wrapped in a function that returns its module when a
//     call first uses it); redis_state.lua (a counter
//     read and written: one string of its fields, or a hash);
//     redis_decide.lua (each limit's key read and decided, then the
//     reservation; a batch's new keys made copies of its first
//     newcomer's, which was decided); redis_acts.lua (what each key is
//     written: count and lease, hold, release, charge, lockout; and the
//     reply); redis_entry.lua.
//   - When Redis fails or answers too late (the call's error path, not
//     its usual way back): late.go (an answer that comes after the
//     caller stopped waiting, and the local admissions and acts it
//     journals; it hands the tokens Redis leased such a call back to
//     lease.go, giveBackLeased), writeback.go (those written back to
//     Redis, each counted once).
//   - Beside the call: known.go (what Redis last said of each key, for
//     a gateway that decides alone), fleet.go (fleet membership, for
//     each gateway's local share), slots.go (Slots, concurrency limits:
//     requests in flight), once.go (Once), reset.go, eviction.go; and
//     store.go (Config, New, Close, Stats).
//
// It decides with the algorithms and semantics of package limit and must
// not change them: a decision of the Redis store is the memory store's on
// Redis's clock. It knows nothing about HTTP. Tests of other packages set
// a fixed decision clock through package redisstoretest (testhook.go), the
// only way to set one: production code must not.
package redisstore
