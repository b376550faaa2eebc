package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisBatchAsOne checks that a batch on one Redis goes as one script
// call (FCALL) that decides each of its calls exactly as a script call of
// its own would, with a call's error its own: the same calls on other
// keys, sent one by one, get the same answers, step by step.
func TestRedisBatchAsOne(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	sw := &limit.Params{Algorithm: "sliding_window", Limit: 3, Window: time.Second, Precision: 10}
	fw := &limit.Params{Algorithm: "fixed_window", Limit: 2, Window: time.Second}
	tb := &limit.Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 5}
	// One step's calls, on keys named after prefix: one limit, two
	// limits of one request, a cost, a charge, a shadow limit, a key seen
	// twice in one batch, a call Redis refuses (bad settings), and a new
	// caller's counter under the key budget.
	step := 0
	calls := func(prefix string) []*batchCall {
		reqs := [][]limit.Request{
			{{Key: prefix + "|/a", Params: sw}},
			{{Key: prefix + "|", Params: fw}, {Key: prefix + "|/b", Params: sw}},
			{{Key: prefix + "|/c", Params: tb, Cost: 2}},
			{{Key: prefix + "|/d", Params: fw, Act: limit.Charge, Cost: 3}},
			nil, // refused
			{{Key: prefix + "|/e", Params: sw, Shadow: true}},
			{{Key: prefix + "|/a", Params: sw}},
			// A caller's counter under the key budget.
			{{Key: prefix + "|/f|" + strconv.Itoa(step), Params: sw, Overflow: prefix + "|/f|overflow"}},
		}
		var out []*batchCall
		for _, rs := range reqs {
			if rs == nil {
				out = append(out, &batchCall{keys: []string{redisKey(prefix, prefix+"|/x")}, args: []any{"", "bogus", "", 0}})
				continue
			}
			keys, tag, _, err := redisKeys(rs)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &batchCall{keys: keys, args: red.scriptArgs(time.Time{}, rs, tag, nil)})
		}
		return out
	}
	fcalls := func() int64 {
		s := srv.Info("commandstats")["cmdstat_fcall"]
		_, v, _ := strings.Cut(s, "calls=")
		v, _, _ = strings.Cut(v, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	for ; step < 6; step++ {
		clock.us.Add(150_000)
		batch := calls("one")
		if !red.asOne(batch) {
			t.Fatal("asOne: got false, want true on one Redis with the library loaded")
		}
		before := fcalls()
		red.runBatch(ctx, batch)
		if got := fcalls() - before; got != 1 {
			t.Errorf("step %d: FCALLs for a batch of %d: got %d, want 1", step, len(batch), got)
		}
		for i, want := range calls("alone") {
			want.v, want.err = red.run(ctx, want.keys, want.args)
			got := batch[i]
			if (got.err == nil) != (want.err == nil) || !slices.Equal(got.v, want.v) {
				t.Errorf("step %d, call %d: got %v %v, want %v %v", step, i, got.v, got.err, want.v, want.err)
			}
			if want.err != nil && (!isScriptError(got.err) || !strings.Contains(got.err.Error(), "bad settings")) {
				t.Errorf("step %d, call %d: got error %v, want Redis's refusal of bad settings", step, i, got.err)
			}
		}
	}
}

// newFixedFunctions returns newFixedRedis's store, warmed up, and fails
// the test unless its calls use the function library (FCALL).
func newFixedFunctions(t *testing.T, srv *redistest.Server) (*Store, *fixedClock) {
	t.Helper()
	red, clock := newFixedRedis(t, srv)
	redistest.Ready(t, red)
	if !red.fn.on.Load() {
		t.Fatal("the function library is not loaded")
	}
	return red, clock
}

// TestRedisBatchAsOneLostLibrary checks a batch sent as one FCALL to a
// node that lost the library (FUNCTION FLUSH): Redis refuses the FCALL as
// a whole, and each call is sent again by EVAL and decided once.
func TestRedisBatchAsOneLostLibrary(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, _ := newFixedRedis(t, srv)
	ctx := context.Background()
	redistest.Ready(t, red)
	if err := srv.Client().FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 2, Window: time.Hour}
	var batch []*batchCall
	for range 3 {
		reqs := []limit.Request{{Key: "lost|/", Params: p}}
		keys, tag, _, err := redisKeys(reqs)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, &batchCall{keys: keys, args: red.scriptArgs(time.Time{}, reqs, tag, nil)})
	}
	if !red.asOne(batch) {
		t.Fatal("asOne: got false, want true before the loss is known")
	}
	red.runBatch(ctx, batch)
	for i, c := range batch {
		if c.err != nil {
			t.Fatalf("call %d: %v", i, c.err)
		}
		// The limit of 2 admits the first two, each counted once.
		if got, want := c.v[1] == 1, i < 2; got != want {
			t.Errorf("call %d: allowed: got %v, want %v (reply %v)", i, got, want, c.v)
		}
	}
	if got, err := redistest.FieldInt(ctx, srv.Client(), redisKey("lost", "lost|/"), "c"); err != nil || got != 2 {
		t.Errorf("count: got %v %v, want 2", got, err)
	}
}

// TestRedisSameArgs checks which batches carry their calls' arguments
// once (sharedMark): calls whose arguments are all the same strings, and
// no others.
func TestRedisSameArgs(t *testing.T) {
	t.Parallel()
	call := func(args ...any) *batchCall { return &batchCall{args: args} }
	for _, tc := range []struct {
		batch []*batchCall
		want  bool
	}{
		{[]*batchCall{call("", "s", ""), call("", "s", "")}, true},
		{[]*batchCall{call("", "s", ""), call("", "s", ""), call("", "s", "1 - 0 0 0 0")}, false},
		{[]*batchCall{call("", "s", ""), call("", "t", "")}, false},
		{[]*batchCall{call("", 1), call("", 1)}, false}, // not strings: never assumed equal
	} {
		if got := sameArgs(tc.batch); got != tc.want {
			t.Errorf("sameArgs(%v): got %v, want %v", tc.batch, got, tc.want)
		}
	}
}
