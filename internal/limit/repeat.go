package limit

import (
	"context"
	"time"
)

// A request may name one counter more than once: an Envoy rate-limit call
// with a repeated descriptor, or two limits that resolve to the same key.
// Each naming counts (docs/algorithms.md, "The same counter twice"): a
// counter named twice by a request of one unit is charged two, all or
// nothing. The stores decide such a call as one with the repeats merged
// into one request of their summed cost, so that the decision and the
// count stay one atomic step on one state.

// Repeats reports whether two requests of reqs name the same counter
// with the same settings and the same kind of act, so that AllowMerged
// must decide them. It allocates nothing.
func Repeats(reqs []Request) bool {
	for i := 1; i < len(reqs); i++ {
		for j := range i {
			if mergeable(&reqs[i], &reqs[j]) {
				return true
			}
		}
	}
	return false
}

// mergeable reports whether a and b are one counter named twice: the same
// key, params and act, so that one request of their summed cost decides
// both. Two limits with different settings on one key are left apart:
// they are two limits, each deciding on its own terms.
func mergeable(a, b *Request) bool {
	return a.Key == b.Key && a.Tag == b.Tag && a.Overflow == b.Overflow &&
		a.Shadow == b.Shadow && a.Defer == b.Defer && a.Charge == b.Charge &&
		a.Hold == b.Hold && a.Release == b.Release &&
		(a.Params == b.Params || (a.Params != nil && b.Params != nil && *a.Params == *b.Params))
}

// AllowMerged decides reqs with allow, a store's Allow for requests of
// distinct counters, after merging the requests that Repeats finds into
// one each, of their summed units; each of them gets the merged
// request's Result, which counts them all.
func AllowMerged(ctx context.Context, now time.Time, reqs []Request, res []Result,
	allow func(context.Context, time.Time, []Request, []Result) (bool, error)) (bool, error) {
	merged := make([]Request, 0, len(reqs))
	of := make([]int, len(reqs)) // of[i]: the index of reqs[i] in merged
	for i := range reqs {
		of[i] = -1
		for j := range merged {
			if mergeable(&reqs[i], &merged[j]) {
				merged[j].Cost = merged[j].Units() + reqs[i].Units()
				of[i] = j
				break
			}
		}
		if of[i] < 0 {
			of[i] = len(merged)
			merged = append(merged, reqs[i])
		}
	}
	mres := make([]Result, len(merged))
	allowed, err := allow(ctx, now, merged, mres)
	for i := range reqs {
		res[i] = mres[of[i]]
	}
	return allowed, err
}
