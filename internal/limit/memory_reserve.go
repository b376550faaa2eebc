package limit

import "time"

// This file holds reservations (Request.Wait): a call with no room now is
// decided at the earliest instant its limits have room, within its wait.

// maxReserveRounds bounds the decisions reserve makes: each moves the
// instant to when the limits that denied said they have room, which is
// when they do but for sliding windows' rounding, which a second round
// settles.
const maxReserveRounds = 4

// reserve finds, for a call that decideAll did not admit now (ns) — a
// limit had no room, or a key's queue ends at at — the earliest instant
// within its wait (callWait: wait, if it may) at which every enforced
// request is admitted, and decides the call there; the Results are then
// those at that instant, which it returns with the decision. When the
// call cannot wait that long, the Results are those decideAll gave (with
// heldOnly), the requests admitted only at the end of a queue denied
// until then (without a lockout, as a denial for units held is), and it
// returns ns. The shards are locked.
func (m *Memory) reserve(ns, at int64, wait time.Duration, ok bool, reqs []Request, ents []*entry, res []Result, heldOnly uint64) (int64, bool, uint64) {
	t, ok2 := nextTry(at, reqs, res)
	for round := 0; ok && ok2 && round < maxReserveRounds; round++ {
		if t-ns > int64(wait) {
			break
		}
		var tAt int64
		var tRes [inline]Result
		try := tRes[:]
		if len(reqs) > inline {
			try = make([]Result, len(reqs))
		}
		tAt, tAllowed, tHeldOnly := m.decideAll(ns, t, reqs, ents, try[:len(reqs)])
		if tAllowed {
			copy(res, try[:len(reqs)])
			return tAt, true, tHeldOnly
		}
		t, ok2 = nextTry(tAt, reqs, try)
	}
	// Refused: as decided now, and queued requests denied until their
	// turn.
	for i := range reqs {
		r, e := &reqs[i], ents[i]
		if r.Act.follows() || e.ahead <= ns {
			continue
		}
		left := time.Duration(e.ahead - ns)
		if res[i].Allowed && r.Enforced() && i < 64 {
			res[i].Allowed = false
			heldOnly |= 1 << i
		}
		if !res[i].Allowed {
			res[i].fromQueue(left)
		}
	}
	allowed := true
	for i := range reqs {
		if !res[i].Allowed && reqs[i].Enforced() {
			allowed = false
		}
	}
	return ns, allowed, heldOnly
}

// callWait returns how long a call whose requests res decided may wait
// for room: the least Wait of its enforced requests that have none now
// (denied, or behind a key's queue), and whether it may wait at all. A
// request whose limit has room now does not bound the wait; a limit of 0
// and a cost its limit can never admit never have room.
func callWait(ns int64, reqs []Request, ents []*entry, res []Result) (time.Duration, bool) {
	wait := time.Duration(-1)
	for i := range reqs {
		r := &reqs[i]
		if !r.Enforced() || (res[i].Allowed && ents[i].ahead <= ns) {
			continue
		}
		p := r.Params
		if r.Wait <= 0 || p.Limit == 0 || (p.Limit > 0 && r.Units() > capacity(p)) {
			return 0, false
		}
		if wait < 0 || r.Wait < wait {
			wait = r.Wait
		}
	}
	return wait, wait > 0
}

// nextTry returns the instant after at when the enforced requests that
// res denied said they would be admitted, and false if one of them is
// never admitted (no RetryAfter).
func nextTry(at int64, reqs []Request, res []Result) (int64, bool) {
	t := at
	for i := range reqs {
		if res[i].Allowed || !reqs[i].Enforced() {
			continue
		}
		if res[i].RetryAfter <= 0 {
			return 0, false
		}
		t = max(t, at+int64(res[i].RetryAfter))
	}
	return t, true
}

// fromQueue makes the Result of a request decided at the end of its key's
// queue of reservations, which ends left from now, run from now: its
// Reset and, when denied, its RetryAfter are left longer.
func (r *Result) fromQueue(left time.Duration) {
	r.Reset += left
	if !r.Allowed {
		r.RetryAfter += left
	}
}
