package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batching is how a store batches its calls: max is Config.MaxBatch;
// batchers the batcher of each node, by its *breaker, when max is above
// 1; onBatch is Config.OnBatch.
type batching struct {
	max      int
	batchers sync.Map
	onBatch  func(int)
}

// DefaultBatch is the most script calls one round trip to a Redis
// node carries (Config.MaxBatch).
const DefaultBatch = 64

// batcher coalesces the script calls of one Redis node (docs/fleet.md, "Redis:
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

	mu       sync.Mutex
	busy     bool         // a round trip is in flight
	inflight *roundTrip   // it
	queue    []*batchCall // the calls waiting for the next one
}

// batchCall is one script call waiting in a batcher's queue.
type batchCall struct {
	keys []string
	args []any
	// memo makes Redis run the call once, however often it is sent
	// (memo.go); together is the memo of the one script call it went in
	// with others (runAsOne), if it did: the batch's, not its own.
	memo     memo
	together memo
	// state is waiting until either the call's caller stops waiting
	// (left: its bound passed or its context ended; the call is never
	// sent) or a batch takes it (taken: it will be sent and answered).
	state atomic.Int32
	// rt is the round trip that carries it, once taken; q its batcher
	// (nil when it goes alone).
	rt atomic.Pointer[roundTrip]
	q  *batcher
	// done receives once the call is answered.
	done chan struct{}
	v    []int64
	err  error
	// shared reports that err is the failure of a round trip that
	// carried other calls too, and that another of them reported it
	// to the node's breaker.
	shared bool
	// mu guards answered and late: a caller that stops waiting for a
	// call in flight leaves late, which gets the answer when it comes.
	mu       sync.Mutex
	answered bool
	late     *lateCall
}

// roundTrip is one round trip to a node, from when it started (ns since
// the store's epoch). Its callers that stop waiting for it, and the
// callers that stop waiting behind it in the queue, tell the node's
// breaker one failure per Timeout it has been in flight, as many as
// round trips that each time out would: periods counts those told.
type roundTrip struct {
	sent    int64
	periods atomic.Int64
}

// failure reports whether a caller that stops waiting at now (ns since
// the epoch) tells the breaker a failure: the first for each Timeout the
// round trip has been in flight.
func (rt *roundTrip) failure(now int64, timeout time.Duration) bool {
	p := (now - rt.sent) / int64(max(timeout, 1))
	for {
		old := rt.periods.Load()
		if p <= old {
			return false
		}
		if rt.periods.CompareAndSwap(old, p) {
			return true
		}
	}
}

// The states of a call.
const (
	callWaiting int32 = iota
	callLeft
	callTaken
)

// take claims c for a batch, unless its caller left.
func (c *batchCall) take() bool { return c.state.CompareAndSwap(callWaiting, callTaken) }

// finish answers c: its caller, or, if the caller stopped waiting, the
// late call it left.
func (c *batchCall) finish() {
	c.mu.Lock()
	c.answered = true
	late := c.late
	c.mu.Unlock()
	if late != nil {
		late.sentUnder(c.sentAs())
		late.answered(c.v, c.err)
		return
	}
	c.done <- struct{}{}
}

// sentAs returns the memo c went under, once its round trip ended: its
// own, or, when it went in one script call with others, their batch's
// (together); and when that round trip began (ns since the epoch).
func (c *batchCall) sentAs() (m memo, first int64, together bool) {
	if rt := c.rt.Load(); rt != nil {
		first = rt.sent
	}
	if c.together.key != "" {
		return c.together, first, true
	}
	m = c.memo
	m.again = false
	return m, first, false
}

// result returns what c's caller learns of it, once answered.
func (c *batchCall) result() callResult {
	m, first, together := c.sentAs()
	return callResult{v: c.v, shared: c.shared, memo: m, first: first, together: together}
}

// batcherFor returns the batcher of b's node.
func (r *Store) batcherFor(b *breaker) *batcher {
	if q, ok := r.batch.batchers.Load(b); ok {
		return q.(*batcher)
	}
	q, _ := r.batch.batchers.LoadOrStore(b, &batcher{max: r.batch.max})
	return q.(*batcher)
}

// do runs the script for keys and args on the batcher's node: alone
// when nothing is in flight, else in the next batch. The round trips run
// in a goroutine of their own, bounded by the store's call timeout; the
// caller waits for its call at most the store's Timeout in the queue and
// Timeout once it is sent (await). shared reports that err was a batch's
// failure already reported by another of its calls, so that the node's
// breaker counts one failure per round trip, not one per call.
func (q *batcher) do(ctx context.Context, r *Store, keys []string, args []any, m memo) (callResult, error) {
	c := &batchCall{keys: keys, args: args, memo: m, done: make(chan struct{}, 1), q: q}
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		c.state.Store(callTaken)
		rt := &roundTrip{sent: r.clock()}
		c.rt.Store(rt)
		q.inflight = rt
		q.mu.Unlock()
		go q.send(r, []*batchCall{c})
	} else {
		q.queue = append(q.queue, c)
		q.mu.Unlock()
	}
	return r.await(ctx, c)
}

// await waits for c's answer: at most the store's wait (rtt: from
// Timeout up to MaxTimeout, as Redis's round trips show it needs) while
// c waits in a queue (then it leaves it, never sent), and that wait from
// when the round trip that carries it started. A call the caller stops
// waiting for while it is in flight returns a lateCall, which gets
// Redis's answer when it comes. shared reports that the node's breaker
// is not to hear of the failure: another caller told it of the same
// round trip's wait, or the caller went away.
func (r *Store) await(ctx context.Context, c *batchCall) (callResult, error) {
	timeout := r.wait.rtt.wait()
	t := newTimer(timeout)
	defer stopTimer(t)
	for {
		var err error
		select {
		case <-c.done:
			return c.result(), c.err
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C:
			if rt := c.rt.Load(); rt != nil {
				if left := int64(timeout) - (r.clock() - rt.sent); left > 0 {
					t.Reset(time.Duration(left))
					continue
				}
			}
			err = errCallTimeout
		}
		if c.state.CompareAndSwap(callWaiting, callLeft) {
			// Never sent: the breaker hears of it only if the round trip
			// it waited behind has been in flight for a Timeout.
			shared := true
			if c.q != nil && err == errCallTimeout {
				c.q.mu.Lock()
				rt := c.q.inflight
				c.q.mu.Unlock()
				shared = rt == nil || !rt.failure(r.clock(), timeout)
			}
			return callResult{shared: shared, late: &lateCall{r: r, outcome: lateNotCounted}}, err
		}
		c.mu.Lock()
		if c.answered {
			c.mu.Unlock()
			<-c.done
			return c.result(), c.err
		}
		c.late = &lateCall{r: r}
		r.wb.lateWaiting.Add(1)
		late := c.late
		c.mu.Unlock()
		shared := true
		if rt := c.rt.Load(); rt != nil && err == errCallTimeout {
			shared = !rt.failure(r.clock(), timeout)
		}
		return callResult{shared: shared, late: late}, err
	}
}

// timers are the stopped timers of calls that were answered, for the
// next calls' waits: each call waits with a timer, and most are answered
// before it fires. A stopped timer's channel holds nothing (time.Timer's
// Stop, since Go 1.23; stopTimer drains it too, for a process run with
// GODEBUG=asynctimerchan=1), so a timer taken from here fires only after
// its Reset.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// newTimer returns a timer that fires after d.
func newTimer(d time.Duration) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

// stopTimer stops t, which newTimer returned, and keeps it for another.
func stopTimer(t *time.Timer) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	timers.Put(t)
}

// observe tells the wait for decisions (rtt) of a round trip begun at
// start that ended with err: one Redis answered, whatever it decided.
// An answer within the longest wait, even to callers that stopped
// waiting for it, also tells the breaker of one Redis that Redis
// answers: calls that timed out before the wait had learnt Redis's round
// trip do not keep it open, while a Redis slower than the longest wait
// still fails (in a cluster the wait is fixed: late answers tell
// nothing there).
func (r *Store) observe(start int64, err error) {
	if err != nil && !isScriptError(err) {
		return
	}
	d := time.Duration(r.clock() - start)
	r.wait.rtt.observe(d)
	if b := r.nodes.single; b != nil && r.wait.rtt.adapts() && d <= r.wait.rtt.ceiling {
		b.success()
	}
}

// callResult is what a caller learns of its call: Redis's answer v;
// shared, for a failure, that the node's breaker is not to hear of it
// from this caller (see await); late, when the caller stopped waiting, what
// becomes of the call; memo, first and together, for an answered call,
// the memo it went under, when its round trip began, and whether it went
// in one script call with others (batchCall.sentAs).
type callResult struct {
	v        []int64
	shared   bool
	late     *lateCall
	memo     memo
	first    int64
	together bool
}

// errCallTimeout is the error of a call that Redis did not answer within
// the store's Timeout. It is a net.Error whose Timeout is true, as a
// command's read timeout is.
var errCallTimeout error = callTimeoutError{}

type callTimeoutError struct{}

func (callTimeoutError) Error() string   { return "no answer within the timeout" }
func (callTimeoutError) Timeout() bool   { return true }
func (callTimeoutError) Temporary() bool { return true }

// send runs batch, answers its calls, and then the queue's next batches
// until the queue is empty. Each round trip's context is its own, bounded
// like a call: no one caller's going away cancels the others' decisions,
// and a round trip whose callers stopped waiting still learns what Redis
// did.
func (q *batcher) send(r *Store, batch []*batchCall) {
	for first := true; len(batch) > 0; first = false {
		ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
		start := r.clock()
		r.runBatch(ctx, batch)
		r.observe(start, batch[0].err)
		cancel()
		r.stats.roundTrips.Add(1)
		if r.batch.onBatch != nil && !first {
			r.batch.onBatch(len(batch))
		}
		for _, c := range batch {
			c.finish()
		}
		batch = q.next(r)
	}
}

// next takes the next batch from the queue: up to max calls whose
// callers still wait, in the order they came; none marks the node idle.
func (q *batcher) next(r *Store) []*batchCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []*batchCall
	rt := &roundTrip{sent: r.clock()}
	i := 0
	for ; i < len(q.queue) && len(batch) < q.max; i++ {
		if c := q.queue[i]; c.take() {
			c.rt.Store(rt)
			batch = append(batch, c)
		}
	}
	rest := copy(q.queue, q.queue[i:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	q.inflight = rt
	if len(batch) == 0 {
		q.busy, q.inflight = false, nil
	}
	return batch
}

// alone runs the script for keys and args in a round trip of its own
// (Config.MaxBatch 1), waiting for it as do does.
func (r *Store) alone(ctx context.Context, keys []string, args []any, m memo) (callResult, error) {
	c := &batchCall{keys: keys, args: args, memo: m, done: make(chan struct{}, 1)}
	c.state.Store(callTaken)
	c.rt.Store(&roundTrip{sent: r.clock()})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.wait.call)
		start := r.clock()
		c.v, c.err = r.runOnce(ctx, keys, args, m)
		r.observe(start, c.err)
		cancel()
		r.stats.roundTrips.Add(1)
		c.finish()
	}()
	return r.await(ctx, c)
}

// runBatch runs the script for every call of batch in one round trip:
// in one script call when it can (asOne), else in a pipeline of one per
// call; and again with EVAL for those whose node lost the script. A failure of the
// whole round trip (a connection error, a timeout) is every call's, and
// reported by the first only. A call sent again carries its memo, marked
// (memo.go).
func (r *Store) runBatch(ctx context.Context, batch []*batchCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.v, c.err = r.runOnce(ctx, c.keys, c.args, c.memo)
		return
	}
	pending := batch
	if r.asOne(batch) {
		r.runAsOne(ctx, batch)
		pending = nil
	}
	// As run does: a batch on a connection Redis closed is sent again on
	// another, a few times (isClosedConn).
	for try := 0; len(pending) > 0 && try < closedConnTries && ctx.Err() == nil; try++ {
		cmds := r.pipeline(ctx, pending, func(p redis.Pipeliner, c *batchCall) *redis.Cmd {
			keys, args := c.memo.with(c.keys, c.args)
			return r.scriptCmd(ctx, p, keys, args)
		})
		again := pending[:0:0]
		for i, c := range pending {
			c.v, c.err = cmds[i].Int64Slice()
			if try > 0 {
				c.err = resent(c.err)
			}
			if c.err != nil && isClosedConn(c.err) {
				c.memo.again = true
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
		r.fn.lost(lost[0].err)
		r.rewarm()
		cmds := r.pipeline(ctx, lost, func(p redis.Pipeliner, c *batchCall) *redis.Cmd {
			keys, args := c.memo.with(c.keys, c.args)
			return p.Eval(ctx, r.src, keys, args...)
		})
		for i, c := range lost {
			c.v, c.err = cmds[i].Int64Slice()
			if c.memo.again {
				c.err = resent(c.err) // a send before it may have run
			}
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
func (r *Store) pipeline(ctx context.Context, batch []*batchCall, cmd func(redis.Pipeliner, *batchCall) *redis.Cmd) []*redis.Cmd {
	r.stats.calls.Add(int64(len(batch)))
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

// notSent reports whether err is a failure to connect to Redis: nothing
// of the call was sent (connection refused, no route, a dial timeout, or
// a new connection's handshake that Redis did not answer), so Redis is
// known not to have run it. A call sent before on a connection Redis
// closed, then refused (resentError), may have run.
func notSent(err error) bool {
	var re resentError
	if errors.As(err, &re) {
		return false
	}
	var he handshakeError
	if errors.As(err, &he) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// handshakeHook marks the failures of a new connection's handshake as
// handshakeErrors. go-redis sends a new connection's handshake (HELLO,
// then SELECT or CLIENT SETNAME when configured) and waits for its reply
// before it writes the command that needed the connection: a call whose
// handshake Redis did not answer (a Redis stalled by a slow command or
// a fork, or stopped, while the call dialled) was never written, though
// its error is a timeout like that of a call in flight.
type handshakeHook struct{}

func (handshakeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (handshakeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && cmd.Name() == "hello" && !isScriptError(err) {
			err = handshakeError{err}
			cmd.SetErr(err)
		}
		return err
	}
}

func (handshakeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil || isScriptError(err) || !handshakeCmds(cmds) {
			return err
		}
		err = handshakeError{err}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// handshakeCmds reports whether cmds are those go-redis sends after HELLO
// on a new connection: none of the store's own calls is one of them.
func handshakeCmds(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "select", "client", "readonly":
		default:
			return false
		}
	}
	return len(cmds) > 0
}

// addHandshakeHook adds handshakeHook to client: on a cluster, to each of
// its nodes' clients, which run their connections' handshakes.
func addHandshakeHook(client redis.UniversalClient) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(handshakeHook{}) })
		return
	}
	client.AddHook(handshakeHook{})
}

// handshakeError is the error of a new connection's handshake (see
// handshakeHook). It has no Unwrap, which go-redis applies once to a
// handshake's error (and would take the mark off); Is, As and Timeout
// answer for the error it marks.
type handshakeError struct{ err error }

func (e handshakeError) Error() string {
	return "handshake of a new connection: " + e.err.Error()
}

func (e handshakeError) Is(target error) bool { return errors.Is(e.err, target) }
func (e handshakeError) As(target any) bool   { return errors.As(e.err, target) }

// Timeout reports whether the handshake timed out, as net.Error's does.
func (e handshakeError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// Temporary is net.Error's, which go-redis may ask.
func (e handshakeError) Temporary() bool { return false }

// resentError is the error of a call that was sent on a connection Redis
// closed, and sent again (isClosedConn): its first send may have run.
type resentError struct{ error }

func (e resentError) Unwrap() error { return e.error }

// resent returns err, the error of a call sent again after a closed
// connection, as a resentError when it says the call was not sent this
// time, which no longer tells that it never ran.
func resent(err error) error {
	if !notSent(err) {
		return err
	}
	return resentError{err}
}

// isScriptError reports whether err is Redis's answer to one script call
// (an error reply such as OOM or NOSCRIPT) rather than a failure of the
// connection or the round trip.
func isScriptError(err error) bool {
	_, ok := err.(redis.Error)
	return ok
}
