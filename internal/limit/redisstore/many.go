package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// manyMark is the first argument of a script call that carries several
// calls (redis_entry.lua, many), sameMark that of one whose calls all have
// as many keys and as many arguments as each other, and sharedMark that of
// one whose calls have the same arguments too, which it carries once:
// the calls of one rule, whose keys differ (a new caller each, on the
// cold path), cost Redis no arguments of their own.
const (
	manyMark   = "*"
	sameMark   = "="
	sharedMark = "&"
)

// sameArgs reports whether the calls of batch have the same arguments,
// strings all (scriptArgs).
func sameArgs(batch []*batchCall) bool {
	first := batch[0].args
	for _, c := range batch[1:] {
		for j, a := range c.args {
			s, ok := a.(string)
			if t, ok2 := first[j].(string); !ok || !ok2 || s != t {
				return false
			}
		}
	}
	return true
}

// asOne reports whether batch goes to Redis as one script call that
// carries all its calls (docs/fleet.md, "Batching"): on one Redis, not a
// cluster, where the keys of one script call must share a slot; and by
// FCALL, whose library runs one call no slower than many; and when no
// call of it is sent again (a write-back whose fate is unknown, or one
// under the memo of the call it follows, late.go): one script call goes
// under one memo, its first call's, and as a first send, which would
// count such a call again. Otherwise each call is a script call of its
// own in the batch's pipeline, with its own memo and mark.
func (r *Store) asOne(batch []*batchCall) bool {
	return len(batch) > 1 && r.nodes.single != nil && r.fn.on.Load() &&
		!slices.ContainsFunc(batch, func(c *batchCall) bool { return c.memo.again })
}

// runAsOne runs the calls of batch in one script call, which decides each
// as it would decide it alone, one after the other (redis_entry.lua, many), and
// answers each with its own reply or error. A failure of the script call
// as a whole (a connection error, a timeout, a refusal such as OOM or a
// lost library) is every call's. As run does, it is sent again on
// another connection, a few times, if Redis had closed the one it took
// (isClosedConn), and with EVAL if the node lost the library. The batch
// runs once however often it is sent: it carries the memo of its call
// whose memo lives longest, the first of those (memo.go).
func (r *Store) runAsOne(ctx context.Context, batch []*batchCall) {
	nk, na := 0, 3+2*len(batch)
	same := true
	var m memo
	for _, c := range batch {
		nk += len(c.keys)
		na += len(c.args)
		same = same && len(c.keys) == len(batch[0].keys) && len(c.args) == len(batch[0].args)
		if c.memo.key != "" && c.memo.life > m.life {
			m = c.memo
			m.again = false
		}
	}
	for _, c := range batch {
		c.together = m
	}
	keys := make([]string, 0, nk+1)
	args := make([]any, 0, na+2)
	if m.key != "" {
		args = append(args, m.mark(), strconv.FormatInt(m.life, 10), m.id)
	}
	shared := same && sameArgs(batch)
	switch {
	case shared:
		args = append(args, sharedMark, len(batch), len(batch[0].keys), len(batch[0].args))
	case same:
		args = append(args, sameMark, len(batch), len(batch[0].keys), len(batch[0].args))
	default:
		args = append(args, manyMark, len(batch))
	}
	for _, c := range batch {
		keys = append(keys, c.keys...)
		if !same {
			args = append(args, len(c.keys), len(c.args))
		}
	}
	if shared {
		args = append(args, batch[0].args...)
	} else {
		for _, c := range batch {
			args = append(args, c.args...)
		}
	}
	if m.key != "" {
		keys = append(keys, m.key)
	}
	var v []any
	var err error
	again := false // sent before: that send may have run
	for try := 0; try < closedConnTries; try++ {
		if try > 0 && m.key != "" {
			args[0] = memoAgain
		}
		r.stats.calls.Add(int64(len(batch)))
		v, err = r.client.FCall(ctx, r.fn.name, keys, args...).Slice()
		if try > 0 {
			// The first send may have run: a refusal now does not tell
			// that the calls never did.
			err, again = resent(err), true
		}
		if err == nil || !isClosedConn(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil && isNoScript(err) {
		// The script decides a batch as the library does, and finds the
		// memo of a send that ran before the library was lost.
		r.fn.lost(err)
		r.rewarm()
		r.stats.calls.Add(int64(len(batch)))
		v, err = r.client.Eval(ctx, r.src, keys, args...).Slice()
		if again {
			err = resent(err)
		}
	}
	if err == nil && len(v) != len(batch) {
		err = fmt.Errorf("script answered %d calls for %d", len(v), len(batch))
	}
	for i, c := range batch {
		if err != nil {
			c.v, c.err = nil, err
			continue
		}
		c.v, c.err = int64s(v[i])
	}
}

// int64s returns one call's reply within a reply of many calls: its
// integers, or its error. The integers come as an array, or as one string
// of them separated by spaces (redis_entry.lua, many).
func int64s(v any) ([]int64, error) {
	switch v := v.(type) {
	case error:
		return nil, v
	case string:
		return spaced(v)
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("redis: unexpected element type for []int64, got type %T", x)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected type for one call's reply, got type %T", v)
}

// spaced returns the integers of s, separated by single spaces.
func spaced(s string) ([]int64, error) {
	out := make([]int64, 0, 10)
	for s != "" {
		f, rest, _ := strings.Cut(s, " ")
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: unexpected reply %q: %w", s, err)
		}
		out = append(out, n)
		s = rest
	}
	return out, nil
}
