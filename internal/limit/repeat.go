package limit

import (
	"context"
	"time"
)

// A request may name one counter more than once: an Envoy rate-limit call
// with a repeated descriptor, or two limits that resolve to the same key
// (an override of an Envoy descriptor shares its counter, with a limit of
// its own). Each naming counts (docs/algorithms.md, "The same counter
// twice"): a counter named twice by a request of one unit is charged two,
// all or nothing, and admits only if each of its limits has room for
// them all. The stores decide such a call as one with the repeats merged
// into one request of their summed cost, on the strictest of their
// limits, so that the decision and the count stay one atomic step on one
// state.

// Repeats reports whether two requests of reqs name the same counter for
// the same kind of act, so that AllowMerged must decide them. It
// allocates nothing.
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

// mergeable reports whether a and b are one counter named twice for the
// same act: the same key (and tag), counted state of the same shape, and
// the same act, so that one request of their summed cost decides both.
// A limit that keeps no state (unlimited, or 0) is never merged.
func mergeable(a, b *Request) bool {
	return a.Key == b.Key && a.Tag == b.Tag &&
		a.Act == b.Act &&
		a.Params != nil && b.Params != nil && a.Params.Limit > 0 && b.Params.Limit > 0 &&
		a.Params.Identity(b.Params)
}

// AllowMerged decides reqs with allow, a store's Allow for requests of
// distinct counters, after merging the requests that Repeats finds into
// one each: of their summed units, on the strictest of their Params (the
// smallest capacity, the longest lockout), shadow only if all of them
// are. Each of them gets the merged request's Result, told in its own
// limit.
func AllowMerged(ctx context.Context, now time.Time, reqs []Request, res []Result,
	allow func(context.Context, time.Time, []Request, []Result) (bool, error)) (bool, error) {
	merged := Merge(reqs)
	mres := make([]Result, len(merged.Reqs))
	allowed, err := allow(ctx, now, merged.Reqs, mres)
	for i := range reqs {
		j := merged.Of[i]
		r := mres[j]
		if p, q := reqs[i].Params, merged.Reqs[j].Params; p != q && r.Remaining >= 0 {
			// Told in reqs[i]'s own limit: what is counted is the same.
			r.Limit = p.Limit
			r.Remaining += p.Capacity() - q.Capacity()
			// q's capacity is the least: p's own holds the same count.
			r.Over = max(r.Over+q.Capacity()-p.Capacity(), 0)
		}
		res[i] = r
	}
	return allowed, err
}

// Merged is reqs with the requests that name one counter for one act
// merged (Merge).
type Merged struct {
	// Reqs are the merged requests; their Params may be copies.
	Reqs []Request
	// Of is, for each request given, the index of its merged request.
	Of []int
}

// Merge merges the requests of reqs that name one counter for one act
// into one, as AllowMerged decides them.
func Merge(reqs []Request) Merged {
	m := Merged{Reqs: make([]Request, 0, len(reqs)), Of: make([]int, len(reqs))}
	for i := range reqs {
		q := &reqs[i]
		m.Of[i] = -1
		for j := range m.Reqs {
			t := &m.Reqs[j]
			if !mergeable(q, t) {
				continue
			}
			t.Cost = t.Units() + q.Units()
			t.Shadow = t.Shadow && q.Shadow
			if t.Overflow == "" {
				t.Overflow = q.Overflow
			}
			if q.Params.Capacity() < t.Params.Capacity() || q.Params.Lock > t.Params.Lock {
				p := *t.Params
				if q.Params.Capacity() < p.Capacity() {
					p.Limit, p.Burst, p.Warmup = q.Params.Limit, q.Params.Burst, q.Params.Warmup
				}
				p.Lock = max(p.Lock, q.Params.Lock)
				t.Params = &p
			}
			m.Of[i] = j
			break
		}
		if m.Of[i] < 0 {
			m.Of[i] = len(m.Reqs)
			m.Reqs = append(m.Reqs, *q)
		}
	}
	return m
}
