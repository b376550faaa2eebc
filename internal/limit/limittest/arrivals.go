package limittest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Arrivals returns sorted arrival instants over about six windows from
// start, counted in units of unit since the Unix epoch (1ns for the
// memory store, 1µs for Redis): bursts exactly on, one unit before and one
// after the edges where algorithms slip — window edges (absolute multiples
// of Window, and Window from start), sliding-window bucket edges (of the
// bucket width, and of Window/Precision rounded down, which a ring that
// rounded the wrong way would use), refill instants (multiples of
// Window/Limit) — and uniformly random arrivals.
func Arrivals(rng *rand.Rand, p *limit.Params, start int64, unit time.Duration) []int64 {
	win := max(int64(p.Window/unit), 1)
	end := start + 6*win
	most := max(p.Limit, p.Burst)
	var ts []int64
	burst := func(at int64) {
		if at < start || at >= end {
			return
		}
		for range rng.Int64N(most + 2) {
			ts = append(ts, at)
		}
	}
	edges := func(w int64, offsets ...int64) {
		for k := floorDiv(start, w) + 1; k*w < end; k++ {
			for _, o := range offsets {
				burst(k*w + o)
			}
		}
	}
	edges(win, -1, 0, 1)
	for k := range int64(6) {
		burst(start + k*win)
	}
	if prec := int64(p.Precision); prec > 0 {
		w := (win + prec - 1) / prec
		edges(w, -1, 0)
		edges(max(win/prec, 1), -1, 0)
		for k := range int64(6) {
			burst(start + k*win + w - 1)
		}
	}
	for k := int64(1); k <= 6*p.Limit && k <= 300; k++ {
		if rng.IntN(4) == 0 {
			at := start + k*win/p.Limit
			burst(at)
			burst(at + 1)
		}
	}
	for range 8 * most {
		ts = append(ts, start+rng.Int64N(end-start))
	}
	slices.Sort(ts)
	return ts
}

// RateBound checks that admitted (sorted) never holds more than b + t·rate
// admissions in a closed interval of length t, rate = Limit per Window:
// that n·Window ≤ b·Window + t·Limit for every run of n admissions
// spanning t. It returns the first violation found.
func RateBound(admitted []int64, b int64, p *limit.Params) error {
	// For the run from i to j it must hold that (j-i+1-b)·W ≤ (a_j-a_i)·L,
	// that is (j+1-b)·W - a_j·L ≤ i·W - a_i·L; so for each j it suffices
	// to check against the least right-hand side over i ≤ j. Instants are
	// taken relative to the first so that the products fit.
	if len(admitted) == 0 {
		return nil
	}
	w, l := int64(p.Window), p.Limit
	base := admitted[0]
	best, bestI := int64(1<<62), 0
	for j, a := range admitted {
		rel := a - base
		if v := int64(j)*w - rel*l; v < best {
			best, bestI = v, j
		}
		if (int64(j+1)-b)*w-rel*l > best {
			n := j - bestI + 1
			return fmt.Errorf("%d admitted in [%d, %d] (%v), more than %d + %v·%d/%v",
				n, admitted[bestI], a, time.Duration(a-admitted[bestI]), b, time.Duration(a-admitted[bestI]), l, p.Window)
		}
	}
	return nil
}

// floorDiv returns ⌊a/b⌋ for b > 0, also for a < 0 (instants before 1970).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
