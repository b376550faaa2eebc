package limit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisBatch is the most script calls one round trip to a Redis
// node carries (RedisConfig.MaxBatch).
const DefaultRedisBatch = 64

// batcher coalesces the script calls of one Redis node (README, "Redis:
// one limit for a fleet of gateways", Batching). A call that finds no
// other in flight goes at once, alone: an idle store adds no wait. While
// one is in flight, new calls queue; when it returns, the queue — up to
// max calls, in the order they came — goes to the node in one round trip
// (a pipeline), run by the first of them, and so on until the queue is
// empty. Redis runs a pipeline's scripts one after the other, each
// atomically, so each call decides exactly as it would alone; only the
// round trips are shared.
//
// So there is at most one round trip in flight per node: under load the
// batches grow instead of the round trips, which is what saves the
// gateway's and Redis's CPU (one write and one read per batch, not per
// call).
type batcher struct {
	max int

	mu    sync.Mutex
	busy  bool         // a round trip is in flight
	queue []*batchCall // the calls waiting for the next one
}

// batchCall is one script call waiting in a batcher's queue.
type batchCall struct {
	keys []string
	args []any
	// state is waiting until either the call's caller stops waiting
	// (left: its context ended; the call is never sent) or a batch takes
	// it (taken: it will be answered, or lead the batch).
	state atomic.Int32
	// done receives once the call is taken: from the round trip that
	// answered it, or to make it the one that sends the next batch
	// (lead).
	done chan struct{}
	lead bool
	v    []int64
	err  error
	// shared reports that err is the failure of a round trip that
	// carried other calls too, and that another of them reported it
	// to the node's breaker.
	shared bool
}

// The states of a call.
const (
	callWaiting int32 = iota
	callLeft
	callTaken
)

// take claims c for a batch, unless its caller left.
func (c *batchCall) take() bool { return c.state.CompareAndSwap(callWaiting, callTaken) }

// batcherFor returns the batcher of b's node.
func (r *Redis) batcherFor(b *breaker) *batcher {
	if q, ok := r.batchers.Load(b); ok {
		return q.(*batcher)
	}
	q, _ := r.batchers.LoadOrStore(b, &batcher{max: r.maxBatch})
	return q.(*batcher)
}

// do runs the script for keys and args on the batcher's node: alone
// when nothing is in flight, else in the next batch. shared reports that
// err was a batch's failure already reported by another of its calls, so
// that the node's breaker counts one failure per round trip, not one per
// call.
func (q *batcher) do(ctx context.Context, r *Redis, keys []string, args []any) (v []int64, err error, shared bool) {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		v, err = r.run(ctx, keys, args)
		r.roundTrips.Add(1)
		q.next()
		return v, err, false
	}
	c := &batchCall{keys: keys, args: args, done: make(chan struct{}, 1)}
	q.queue = append(q.queue, c)
	q.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callLeft) {
			return nil, ctx.Err(), false
		}
		<-c.done // taken meanwhile: answered or made the leader soon
	}
	if c.lead {
		q.send(r, c)
	}
	return c.v, c.err, c.shared
}

// next hands the queue on after a round trip: to its first call whose
// caller still waits, which sends it, or, when there is none, marks the
// node idle.
func (q *batcher) next() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		c := q.queue[0]
		if c.take() {
			q.mu.Unlock()
			c.lead = true
			c.done <- struct{}{}
			return
		}
		q.queue[0] = nil
		q.queue = q.queue[1:]
	}
	q.busy = false
	q.mu.Unlock()
}

// send runs the next batch, which starts with lead, answers its calls,
// and hands the queue on. The batch's context is its own, bounded like a
// call: no one caller's going away cancels the others' decisions.
func (q *batcher) send(r *Redis, lead *batchCall) {
	q.mu.Lock()
	n := min(len(q.queue), q.max)
	batch := make([]*batchCall, 0, n)
	for _, c := range q.queue[:n] {
		if c == lead || c.take() {
			batch = append(batch, c)
		}
	}
	rest := copy(q.queue, q.queue[n:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	q.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), r.callTimeout)
	r.runBatch(ctx, batch)
	cancel()
	r.roundTrips.Add(1)
	if r.onBatch != nil {
		r.onBatch(len(batch))
	}
	for _, c := range batch {
		if c != lead {
			c.done <- struct{}{}
		}
	}
	q.next()
}

// runBatch runs the script for every call of batch in one pipeline, and
// again with EVAL for those whose node lost the script. A failure of the
// whole round trip (a connection error, a timeout) is every call's, and
// reported by the first only.
func (r *Redis) runBatch(ctx context.Context, batch []*batchCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.v, c.err = r.run(ctx, c.keys, c.args)
		return
	}
	// As run does: a batch on a connection Redis closed is sent again on
	// another, a few times (isClosedConn).
	pending := batch
	for try := 0; len(pending) > 0 && try < closedConnTries && ctx.Err() == nil; try++ {
		cmds := r.pipeline(ctx, pending, func(p redis.Pipeliner, c *batchCall) *redis.Cmd {
			return p.EvalSha(ctx, r.sha, c.keys, c.args...)
		})
		again := pending[:0:0]
		for i, c := range pending {
			c.v, c.err = cmds[i].Int64Slice()
			if c.err != nil && isClosedConn(c.err) {
				again = append(again, c)
			}
		}
		pending = again
	}
	var lost []*batchCall
	for _, c := range batch {
		if c.err != nil && isNoScript(c.err) {
			lost = append(lost, c)
		}
	}
	if len(lost) > 0 {
		r.rewarm()
		cmds := r.pipeline(ctx, lost, func(p redis.Pipeliner, c *batchCall) *redis.Cmd {
			return p.Eval(ctx, r.src, c.keys, c.args...)
		})
		for i, c := range lost {
			c.v, c.err = cmds[i].Int64Slice()
		}
	}
	// When the round trip failed as a whole, every call has its error:
	// the breaker hears it once.
	if err := batch[0].err; err != nil && !isScriptError(err) {
		for _, c := range batch[1:] {
			c.shared = c.err == err
		}
	}
}

// pipeline sends one command per call of batch, made by cmd, in one
// round trip, and returns them with their answers or errors.
func (r *Redis) pipeline(ctx context.Context, batch []*batchCall, cmd func(redis.Pipeliner, *batchCall) *redis.Cmd) []*redis.Cmd {
	r.calls.Add(int64(len(batch)))
	cmds := make([]*redis.Cmd, len(batch))
	// The error of Exec is the first command's; each command has its own.
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range batch {
			cmds[i] = cmd(p, c)
		}
		return nil
	})
	return cmds
}

// isScriptError reports whether err is Redis's answer to one script call
// (an error reply such as OOM or NOSCRIPT) rather than a failure of the
// connection or the round trip.
func isScriptError(err error) bool {
	_, ok := err.(redis.Error)
	return ok
}
