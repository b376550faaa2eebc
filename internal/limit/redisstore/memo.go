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

// Redis keeps the replies of calls as fields of a few hashes, not a key
// per call, so that memos take no room in the key budget (budget.go) and
// cost Redis no key to make and expire per call: the hash of a memo is
// named by its tag, its life and the period of that length that it was
// made in (memoKey), and each memo written to it moves its expiry to two
// lives ahead (redis_entry.lua, once). Every memo a hash holds was written
// less than its life ago or in the life before, so it is kept at least
// its life; a tag has about three hashes per life at a time.

// memo is what a script call carries so that Redis runs it once: the key
// of the hash that keeps its reply in Redis (memoKey, in the slot of the
// call's keys), its ID, the field of the hash, how long Redis keeps it
// (ms), and whether the call was sent before. The zero memo is none: the
// call runs every time it is sent.
type memo struct {
	key   string
	id    string
	life  int64
	again bool
}

// memoKey returns the key of the hash that keeps the memos of tag that
// live life ms, made at now: "gw:{tag}#done:life:period", the period
// counted in lives since the Unix epoch. "#" never follows the tag of a
// counter (redisKey). The calls of a tag within one period share the
// string (reused).
func memoKey(tag string, life int64, now time.Time) string {
	return memoKeys.get(memoParts{tag: tag, life: life, period: now.UnixMilli() / life}, memoParts.key)
}

// memoParts are what the key of a hash of memos says.
type memoParts struct {
	tag          string
	life, period int64
}

var memoKeys reused[memoParts]

func (m memoParts) key() string {
	b := make([]byte, 0, len(m.tag)+32)
	b = append(b, "gw:{"...)
	b = append(b, m.tag...)
	b = append(b, "}#done:"...)
	b = strconv.AppendInt(b, m.life, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, m.period, 10)
	return string(b)
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
	var b [40]byte
	id := strconv.AppendUint(append(b[:0], callPrefix...), callSeq.Add(1), 36)
	ms := max(life.Milliseconds(), 1)
	return memo{key: memoKey(redisTag(&reqs[0]), ms, time.Now()), id: string(id), life: ms}
}

// mark returns ARGV[1] of a call with m.
func (m *memo) mark() string {
	if m.again {
		return memoAgain
	}
	return memoFirst
}

// with returns the keys and arguments of a script call (redis.lua) with
// m: its key last in keys, its mark, life and ID first in args. Without a
// memo they are keys and args.
func (m *memo) with(keys []string, args []any) ([]string, []any) {
	if m.key == "" {
		return keys, args
	}
	k := make([]string, len(keys)+1)
	copy(k, keys)
	k[len(keys)] = m.key
	a := make([]any, len(args)+3)
	a[0], a[1], a[2] = m.mark(), strconv.FormatInt(m.life, 10), m.id
	copy(a[3:], args)
	return k, a
}
