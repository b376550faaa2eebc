package limittest

import (
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// StoreCall is one Allow in a store step table: at T0+At, Allow must
// answer Want and Res.
type StoreCall struct {
	At   time.Duration
	Reqs []limit.Request
	Want bool
	Res  []limit.Result
}

// UncountedCase is a step table of UncountedCases.
type UncountedCase struct {
	Name  string
	Alg   string
	Calls []StoreCall
}

// UncountedCases are step tables, for every algorithm, of limits that
// admit a request that is not counted: another limit denies it, or the
// key is locked out while the algorithm has room. Their Remaining and
// Reset must be those of the limit without the request, as if it had
// never been decided, and a locked key's Reset the later of that and the
// lockout's end. Before they were, each such Reset was the one the limit
// would have had had the request been counted: the comments give it
// where it differs. Keys start with "app|", durations are whole
// microseconds, and so are the results but for sliding_log's, which run
// to a nanosecond past a window (a microsecond in Redis).
func UncountedCases() []UncountedCase {
	const ms = time.Millisecond
	sec := time.Second
	rule := func(alg string, lim int64, lock time.Duration) *limit.Params {
		p := &limit.Params{Algorithm: alg, Limit: lim, Window: sec, Lock: lock}
		if alg == "sliding_window" {
			p.Precision = 10 // 100ms buckets, a ring of 1.1s
		}
		return p
	}
	total := limit.Request{Key: "app|", Params: &limit.Params{Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}
	totalFull := limit.Result{Allowed: true, Limit: 1, Reset: time.Hour}
	totalDenies := limit.Result{Limit: 1, Reset: time.Hour - 300*ms, RetryAfter: time.Hour - 300*ms}
	admit := func(lim, remaining int64, reset time.Duration) limit.Result {
		return limit.Result{Allowed: true, Limit: lim, Remaining: remaining, Reset: reset}
	}
	deny := func(lim int64, reset, retry time.Duration) limit.Result {
		return limit.Result{Limit: lim, Reset: reset, RetryAfter: retry}
	}

	var cases []UncountedCase
	// The app total denies at 300ms; a rule of 2 per second counted once
	// at 0 (r) and a fresh one (f) would admit. counted is r's Reset
	// after its first request, uncounted its Reset at 300ms without the
	// second, fresh f's Reset had it been counted, and again r's Reset
	// once counted at 300ms.
	for _, tt := range []struct {
		alg                              string
		counted, uncounted, fresh, again time.Duration
	}{
		// fixed_window's Reset is the window's end whether or not the
		// request is counted, unless the window holds nothing.
		{alg: "fixed_window", counted: sec, uncounted: 700 * ms, fresh: 700 * ms, again: 700 * ms},
		{alg: "sliding_window", counted: 1100 * ms, uncounted: 800 * ms, fresh: 1100 * ms, again: 1100 * ms},
		{alg: "sliding_log", counted: sec + 1, uncounted: 700*ms + 1, fresh: sec + 1, again: sec + 1},
		{alg: "token_bucket", counted: 500 * ms, uncounted: 200 * ms, fresh: 500 * ms, again: 700 * ms},
		{alg: "leaky_bucket", counted: 500 * ms, uncounted: 200 * ms, fresh: 500 * ms, again: 700 * ms},
	} {
		r := limit.Request{Key: "app|/r", Params: rule(tt.alg, 2, 0)}
		f := limit.Request{Key: "app|/f", Params: rule(tt.alg, 2, 0)}
		cases = append(cases, UncountedCase{
			Name: tt.alg + " another limit denies",
			Alg:  tt.alg,
			Calls: []StoreCall{
				{Reqs: []limit.Request{total, r}, Want: true, Res: []limit.Result{totalFull, admit(2, 1, tt.counted)}},
				// Counted, r would have 0 left and the Reset again.
				{At: 300 * ms, Reqs: []limit.Request{total, r}, Res: []limit.Result{totalDenies, admit(2, 1, tt.uncounted)}},
				// Counted, f would have 1 left and the Reset fresh.
				{At: 300 * ms, Reqs: []limit.Request{total, f}, Res: []limit.Result{totalDenies, admit(2, 2, 0)}},
				{At: 300 * ms, Reqs: []limit.Request{r}, Want: true, Res: []limit.Result{admit(2, 0, tt.again)}},
				{At: 300 * ms, Reqs: []limit.Request{f}, Want: true, Res: []limit.Result{admit(2, 1, tt.fresh)}},
			},
		})
	}

	// Two requests at 0 fill a rule of 2 per second; a third is denied
	// and locks the rule out for 4.5s. At 4.2s the algorithm has room
	// and the rule is full again (Reset 0 without the request): the Reset
	// is the 300ms left of the lockout (had the request been counted, it
	// would have been 800ms, 1.1s, 1s+1ns, 500ms and 500ms in the order
	// below). counted is the Reset of the first request, second of the
	// second, denied that of the denial without the lockout, and after
	// that of the request at the lockout's end.
	for _, tt := range []struct {
		alg                            string
		counted, second, denied, after time.Duration
	}{
		{alg: "fixed_window", counted: sec, second: sec, denied: sec, after: 500 * ms},
		{alg: "sliding_window", counted: 1100 * ms, second: 1100 * ms, denied: 1100 * ms, after: 1100 * ms},
		{alg: "sliding_log", counted: sec + 1, second: sec + 1, denied: sec + 1, after: sec + 1},
		{alg: "token_bucket", counted: 500 * ms, second: sec, denied: sec, after: 500 * ms},
		{alg: "leaky_bucket", counted: 500 * ms, second: sec, denied: sec, after: 500 * ms},
	} {
		r := limit.Request{Key: "app|/r", Params: rule(tt.alg, 2, 4500*ms)}
		cases = append(cases, UncountedCase{
			Name: tt.alg + " locked out with room",
			Alg:  tt.alg,
			Calls: []StoreCall{
				{Reqs: []limit.Request{r}, Want: true, Res: []limit.Result{admit(2, 1, tt.counted)}},
				{Reqs: []limit.Request{r}, Want: true, Res: []limit.Result{admit(2, 0, tt.second)}},
				{Reqs: []limit.Request{r}, Res: []limit.Result{deny(2, max(tt.denied, 4500*ms), 4500*ms)}},
				{At: 4200 * ms, Reqs: []limit.Request{r}, Res: []limit.Result{deny(2, 300*ms, 300*ms)}},
				{At: 4500 * ms, Reqs: []limit.Request{r}, Want: true, Res: []limit.Result{admit(2, 1, tt.after)}},
			},
		})
	}

	// The algorithm has room during the lockout, and its Reset without
	// the request outlasts the lockout: that is the Reset.
	sw, sl := rule("sliding_window", 2, 800*ms), rule("sliding_log", 2, 800*ms)
	tb, lb := rule("token_bucket", 2, 800*ms), rule("leaky_bucket", 2, 800*ms)
	fw2, fw3 := rule("fixed_window", 2, 300*ms), rule("fixed_window", 3, 300*ms)
	cases = append(cases,
		UncountedCase{
			// Buckets 0 and 5 hold one each; at 1.1s bucket 0 has aged
			// out and bucket 5 ages out at 1.6s, the lockout ends at 1.3s.
			Name: "sliding_window locked out with room until after the lockout",
			Alg:  "sliding_window",
			Calls: []StoreCall{
				{Reqs: []limit.Request{{Key: "app|/r", Params: sw}}, Want: true, Res: []limit.Result{admit(2, 1, 1100*ms)}},
				{At: 500 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sw}}, Want: true, Res: []limit.Result{admit(2, 0, 1100*ms)}},
				{At: 500 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sw}}, Res: []limit.Result{deny(2, 1100*ms, 800*ms)}},
				// Counted: 1.1s.
				{At: 1100 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sw}}, Res: []limit.Result{deny(2, 500*ms, 200*ms)}},
				{At: 1300 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sw}}, Want: true, Res: []limit.Result{admit(2, 0, 1100*ms)}},
			},
		},
		UncountedCase{
			Name: "sliding_log locked out with room until after the lockout",
			Alg:  "sliding_log",
			Calls: []StoreCall{
				{Reqs: []limit.Request{{Key: "app|/r", Params: sl}}, Want: true, Res: []limit.Result{admit(2, 1, sec+1)}},
				{At: 500 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sl}}, Want: true, Res: []limit.Result{admit(2, 0, sec+1)}},
				{At: 500 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sl}}, Res: []limit.Result{deny(2, sec+1, 800*ms)}},
				// Counted: 1s+1ns.
				{At: 1100 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sl}}, Res: []limit.Result{deny(2, 400*ms+1, 200*ms)}},
				{At: 1300 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: sl}}, Want: true, Res: []limit.Result{admit(2, 0, sec+1)}},
			},
		},
		UncountedCase{
			// Full at 1s after two requests at 0; a token is back at
			// 500ms, the lockout ends at 800ms.
			Name: "token_bucket locked out with room until after the lockout",
			Alg:  "token_bucket",
			Calls: []StoreCall{
				{Reqs: []limit.Request{{Key: "app|/r", Params: tb}}, Want: true, Res: []limit.Result{admit(2, 1, 500*ms)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: tb}}, Want: true, Res: []limit.Result{admit(2, 0, sec)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: tb}}, Res: []limit.Result{deny(2, sec, 800*ms)}},
				// Counted: 900ms.
				{At: 600 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: tb}}, Res: []limit.Result{deny(2, 400*ms, 200*ms)}},
				{At: 800 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: tb}}, Want: true, Res: []limit.Result{admit(2, 0, 700*ms)}},
			},
		},
		UncountedCase{
			Name: "leaky_bucket locked out with room until after the lockout",
			Alg:  "leaky_bucket",
			Calls: []StoreCall{
				{Reqs: []limit.Request{{Key: "app|/r", Params: lb}}, Want: true, Res: []limit.Result{admit(2, 1, 500*ms)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: lb}}, Want: true, Res: []limit.Result{admit(2, 0, sec)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: lb}}, Res: []limit.Result{deny(2, sec, 800*ms)}},
				// Counted: 900ms.
				{At: 600 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: lb}}, Res: []limit.Result{deny(2, 400*ms, 200*ms)}},
				{At: 800 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: lb}}, Want: true, Res: []limit.Result{admit(2, 0, 700*ms)}},
			},
		},
		UncountedCase{
			// A window that holds a request is full again only at its
			// end; a reload that raises the limit gives it room during
			// the lockout, which runs on.
			Name: "fixed_window locked out with room until after the lockout",
			Alg:  "fixed_window",
			Calls: []StoreCall{
				{Reqs: []limit.Request{{Key: "app|/r", Params: fw2}}, Want: true, Res: []limit.Result{admit(2, 1, sec)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: fw2}}, Want: true, Res: []limit.Result{admit(2, 0, sec)}},
				{Reqs: []limit.Request{{Key: "app|/r", Params: fw2}}, Res: []limit.Result{deny(2, sec, sec)}},
				{At: 100 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: fw3}}, Res: []limit.Result{deny(3, 900*ms, 200*ms)}},
				{At: 300 * ms, Reqs: []limit.Request{{Key: "app|/r", Params: fw3}}, Want: true, Res: []limit.Result{admit(3, 0, 700*ms)}},
			},
		},
	)
	return cases
}
