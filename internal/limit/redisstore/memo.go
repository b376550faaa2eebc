package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// A script call that counts runs once in Redis, however often it is sent
// (docs/fleet.md, "A call Redis ran runs once"). A call whose connection
// closes before its reply comes may have run or not; the store sends it
// again on another connection (run, runBatch, runAsOne), and a write-back
// whose fate is unknown goes again in a later flush (flushOnce). Each
// such call carries an ID, the same on every send: Redis keeps the reply
// of a call that counted something under the ID for the memo's life, and
// answers a call sent again whose ID it has kept with that reply, without
// deciding again (redis_entry.lua, once). A first send does not look: a
// call goes again only once the connection of its last send has closed,
// or, for a write-back, once the round trip of its last send has ended
// (flushOnce waits for one in flight). A call that only reads carries
// none.
//
// The ID is a random prefix per process and a sequence number: unique
// across a fleet without drawing random bits per call. In a batch sent as
// one script call (runAsOne), the batch keeps one memo, under the ID of
// its first call that has one: it runs whole or not at all, and is only
// ever sent again whole. A call sent again in a later round trip (a
// write-back) never goes in one (asOne), and the write-back of a call of
// such a batch whose fate is unknown first asks whether Redis keeps the
// batch's memo (lateCall).

// memo is what a script call carries so that Redis runs it once: the key
// of its reply in Redis ("gw:{tag}#done:ID", in the slot of the call's
// keys; "#" never follows the tag of a counter, redisKey), how long Redis
// keeps it (ms), and whether the call was sent before. The zero memo is
// none: the call runs every time it is sent.
type memo struct {
	key   string
	life  int64
	again bool
}

// The marks of ARGV[1] of a call with a memo (redis_entry.lua, once).
const (
	memoFirst = "!"
	memoAgain = "!!"
)

// callPrefix is this process's prefix of call IDs, and callSeq the
// number of the last.
var (
	callPrefix = func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b) + "."
	}()
	callSeq atomic.Uint64
)

// memoLife returns how long Redis keeps the reply of one of the store's
// decisions: twice the bound of its whole call (callTimeout, 2.75s by
// default). Every send of a call begins within that bound of the first
// (run, runBatch and runAsOne send again only while the call's context
// lasts), so a send that runs after the first did finds its reply.
func (r *Store) memoLife() time.Duration { return 2 * r.wait.call }

// memoFor returns a new memo for a call of reqs, kept for life: none when
// every request only reads (limit.Read), which counts nothing.
func memoFor(reqs []limit.Request, life time.Duration) memo {
	if !slices.ContainsFunc(reqs, func(q limit.Request) bool { return q.Act != limit.Read }) {
		return memo{}
	}
	id := strconv.AppendUint([]byte(callPrefix), callSeq.Add(1), 36)
	return memo{key: "gw:{" + redisTag(&reqs[0]) + "}#done:" + string(id), life: max(life.Milliseconds(), 1)}
}

// mark returns ARGV[1] of a call with m.
func (m *memo) mark() string {
	if m.again {
		return memoAgain
	}
	return memoFirst
}

// with returns the keys and arguments of a script call (redis.lua) with
// m: its key last in keys, its mark and life first in args. Without a
// memo they are keys and args.
func (m *memo) with(keys []string, args []any) ([]string, []any) {
	if m.key == "" {
		return keys, args
	}
	k := make([]string, len(keys)+1)
	copy(k, keys)
	k[len(keys)] = m.key
	a := make([]any, len(args)+2)
	a[0], a[1] = m.mark(), strconv.FormatInt(m.life, 10)
	copy(a[2:], args)
	return k, a
}
