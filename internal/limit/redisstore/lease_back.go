package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/redis/go-redis/v9"
)

// leaseReturnLua gives a lease's unspent tokens back to Redis.
//
//go:embed lease_return.lua
var leaseReturnLua string

var leaseReturnScript = redis.NewScript(leaseReturnLua)

// giveBack gives tokens of leases back to Redis, in one round trip per
// node, within one call's time: each return counts only if the bucket
// its tokens were counted in still counts (lease_return.lua). A return
// that fails loses its tokens to the fleet until their bucket ends, as
// before there were returns; it is never sent twice.
func (r *Store) giveBack(back []leaseReturn) {
	ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
	defer cancel()
	cmds := make([]*redis.Cmd, len(back))
	run := func(p redis.Pipeliner, sha bool) {
		for i := range back {
			t := &back[i]
			args := []any{t.shape(), t.bucket, t.n}
			if sha {
				cmds[i] = p.EvalSha(ctx, leaseReturnScript.Hash(), []string{t.key}, args...)
			} else {
				cmds[i] = p.Eval(ctx, leaseReturnLua, []string{t.key}, args...)
			}
		}
	}
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, true); return nil })
	if cmds[0].Err() != nil && isNoScript(cmds[0].Err()) {
		_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error { run(p, false); return nil })
	}
	for _, c := range cmds {
		if n, err := c.Int64(); err == nil {
			r.leases.returned.Add(n)
		}
	}
}

// leaseReturn is tokens given back to Redis: n counted in bucket of the
// key under params.
type leaseReturn struct {
	key    string
	params limit.Params
	bucket int64
	n      int64
	// lease is the lease the tokens were taken from, if any: it learns
	// when they are back (tokenLeases.sendBack).
	lease *tokenLease
}

// shape returns the counter's shape as the script names it (the "_id"
// field, redis.lua): a return applies only to a counter of that shape.
func (t *leaseReturn) shape() string {
	p := &t.params
	s := p.Algorithm + "/" + strconv.FormatInt(micros(p.Window), 10) + "/" + strconv.Itoa(p.Precision)
	if p.Calendar != "" {
		zone := p.Zone
		if zone == "" {
			zone = "UTC"
		}
		s += "/" + string(p.Calendar) + "@" + zone
	}
	return s
}

// idleAfter returns how long l may go without a request before its
// tokens go back: three of the mean intervals between its key's requests,
// at least minLeaseIdle and at most most. A burst's leftover tokens so go
// back within a few ms, while a steady key's lease is kept between its
// requests. l.mu is held.
func (l *tokenLease) idleAfter(most time.Duration) time.Duration {
	if l.rate <= 0 {
		return most
	}
	return min(max(time.Duration(3*float64(time.Second)/l.rate), min(minLeaseIdle, most)), most)
}

// minLeaseIdle is the shortest time a lease waits unused before its
// tokens go back.
const minLeaseIdle = 2 * time.Millisecond

// idleCheck gives l's tokens back to Redis when no request asked for them
// for l.idleAfter(ls.idle), or when they were granted ls.idle ago (their
// life), or checks again when one of those will be so. A check that runs
// minLeaseIdle or more after it was due finds the key idle for as long as
// the process was kept from running, its requests too: it looks again
// l.idleAfter later (their life still bounds the tokens' time out).
//
// The life bounds how long a token stays out even on a busy key: a lease
// covers what the key's rate uses in 15ms, so tokens left after ls.idle
// mean its rate fell, and another gateway's request that Redis denies
// meanwhile waits for them only if a lease was granted within LeaseIdle
// and LeaseWait (scriptAnswer.tokensMayComeBack).
func (ls *tokenLeases) idleCheck(l *tokenLease) {
	l.mu.Lock()
	if l.tokens == 0 {
		l.mu.Unlock()
		return
	}
	now := ls.now()
	idle, life := int64(l.idleAfter(ls.idle)), l.granted+int64(ls.idle)
	if l.pending && l.timer != nil {
		// A request of this gateway is asking Redis for the key's next
		// tokens: Redis's answer counts these as held here (its
		// Remaining is the room beside them), so they stay until it is
		// in, and are looked at again an idle time on.
		l.checkAt = now + idle
		l.timer.Reset(time.Duration(idle))
		l.mu.Unlock()
		return
	}
	due := min(l.used+idle, life)
	if l.timer != nil && (now < due || (now < life && now-l.checkAt >= int64(minLeaseIdle))) {
		if now >= due {
			// The check ran late: this process got no CPU meanwhile (a
			// loaded machine), and the key's requests were held up as
			// long as the timer was. Look again an idle time on, once
			// they have come in, within the life.
			due = min(now+idle, life)
		}
		l.checkAt = due
		l.timer.Reset(time.Duration(due - now))
		l.mu.Unlock()
		return
	}
	back := ls.drop(l, now, nil)
	group, used, granted := l.group, l.used, l.granted
	l.mu.Unlock()
	back = ls.dropGroup(l, group, now < life, used, granted, now, back)
	if len(back) > 0 {
		ls.sendBack(back)
	}
}

// dropGroup takes away the tokens of the leases of group other than l,
// appending them to back as drop does, when they are as unused as l,
// whose tokens go back: idle, when no request asked for them since one
// last asked for l (at used); else, when they were granted no later than
// l (at granted), whose life ended. A request takes a token of each of
// its limits or of none, so a lease whose partner's tokens went back
// would otherwise be spent one request at a time, each calling Redis for
// the partner alone, and refilled out of step with it.
func (ls *tokenLeases) dropGroup(l *tokenLease, group []*tokenLease, idle bool, used, granted, now int64, back []leaseReturn) []leaseReturn {
	for _, g := range group {
		if g == l {
			continue
		}
		g.mu.Lock()
		if !g.pending && ((idle && g.used <= used) || (!idle && g.granted <= granted)) {
			back = ls.drop(g, now, back)
		}
		g.mu.Unlock()
	}
	return back
}

// close stops granting leases and returns every token held, for the
// caller to give back.
func (ls *tokenLeases) close() []leaseReturn {
	ls.mu.Lock()
	ls.closed = true
	all := make([]*tokenLease, 0, len(ls.m))
	for _, l := range ls.m {
		all = append(all, l)
	}
	ls.mu.Unlock()
	now := ls.now()
	var back []leaseReturn
	for _, l := range all {
		l.mu.Lock()
		if l.timer != nil {
			l.timer.Stop()
		}
		back = ls.drop(l, now, back)
		l.mu.Unlock()
	}
	return back
}

// async gives back in the background.
func (ls *tokenLeases) async(back []leaseReturn) {
	if len(back) == 0 {
		return
	}
	if !ls.background(func() { ls.sendBack(back) }) {
		// The store is closing: sent here, not in a goroutine its Close
		// no longer waits for.
		ls.sendBack(back)
	}
}

// sendBack gives back to Redis, and then tells the leases whose tokens
// went that Redis has answered (backDone).
func (ls *tokenLeases) sendBack(back []leaseReturn) {
	ls.giveBack(back)
	for _, t := range back {
		l := t.lease
		if l == nil {
			continue
		}
		l.mu.Lock()
		if l.back -= t.n; l.back <= 0 && l.backDone != nil {
			l.back = 0
			close(l.backDone)
			l.backDone = nil
		}
		l.mu.Unlock()
	}
}

// returning returns a channel closed once the tokens of keys on their way
// back to Redis have arrived, or nil when none are on their way.
func (ls *tokenLeases) returning(keys []string) <-chan struct{} {
	for _, k := range keys {
		ls.mu.Lock()
		l := ls.m[k]
		ls.mu.Unlock()
		if l == nil {
			continue
		}
		l.mu.Lock()
		done := l.backDone
		l.mu.Unlock()
		if done != nil {
			return done
		}
	}
	return nil
}

// background runs f in a goroutine that close waits for, unless the
// leases have closed (then it reports false): an Add of bg must not race
// with close's Wait.
func (ls *tokenLeases) background(f func()) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return false
	}
	ls.bg.Go(f)
	return true
}
