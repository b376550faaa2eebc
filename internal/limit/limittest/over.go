package limittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// overCase is a limit that Over charges past: Params, and how the check
// counts what it holds (overCount).
type overCase struct {
	name string
	p    limit.Params
}

// overCases are every algorithm at 10 per 10 s (a bucket drains one
// unit a second), a token bucket of a smaller burst, and a calendar
// day.
func overCases() []overCase {
	var cs []overCase
	for _, alg := range limit.Algorithms() {
		p := limit.Params{Algorithm: alg, Limit: 10, Window: 10 * time.Second}
		if alg == "sliding_window" {
			p.Precision = 10
		}
		cs = append(cs, overCase{name: alg, p: p})
	}
	cs = append(cs,
		overCase{name: "token_bucket burst 5", p: limit.Params{Algorithm: "token_bucket", Limit: 10, Window: 10 * time.Second, Burst: 5}},
		overCase{name: "calendar day", p: limit.Params{Algorithm: "fixed_window", Limit: 10, Window: limit.CalendarDay.Nominal(), Calendar: limit.CalendarDay}},
	)
	return cs
}

// overUnits is units counted at T0+at.
type overUnits struct {
	at    time.Duration
	units int64
}

// overCount returns what the check itself counts in c's limit at T0+t
// after the units of counted (in order, none after t): for the windows,
// the units whose instant the window of a request at t holds (the same
// window for fixed_window and a calendar day, T0 being midnight UTC; the
// last Precision+1 buckets of a second for sliding_window; the closed
// interval [t-Window, t] for sliding_log); for the buckets, the level of
// a bucket that drains one unit a second, rounded up.
func overCount(c overCase, counted []overUnits, t time.Duration) int64 {
	p := &c.p
	var n int64
	switch p.Algorithm {
	case "fixed_window":
		for _, u := range counted {
			if u.at/p.Window == t/p.Window {
				n += u.units
			}
		}
	case "sliding_window":
		width := p.Window / time.Duration(p.Precision)
		for _, u := range counted {
			if int64(t/width-u.at/width) <= int64(p.Precision) {
				n += u.units
			}
		}
	case "sliding_log":
		for _, u := range counted {
			if u.at >= t-p.Window {
				n += u.units
			}
		}
	case "token_bucket", "leaky_bucket":
		per := p.Window / time.Duration(p.Limit) // a unit drains in per
		var level, last time.Duration            // level in time to drain
		for _, u := range counted {
			level = max(level-(u.at-last), 0) + time.Duration(u.units)*per
			last = u.at
		}
		level = max(level-(t-last), 0)
		n = int64((level + per - 1) / per)
	default:
		panic("overCount: no count for " + p.Algorithm)
	}
	return n
}

// overStep is one call of Over's table: a request of Units of Act at
// T0+At, and for a Take or a Defer whether it is admitted.
type overStep struct {
	At    time.Duration
	Act   limit.Act
	Units int64
	Allow bool
}

// overSteps is Over's table: a take of 4 and a defer of 1 admitted, then
// charges of 9 and 5 (18 of a limit of 10), read as they drain; a take
// refused while the limit is over, which counts nothing; and, once all
// has drained, a charge of 25 on nothing, more than the limit's room.
// Every instant is a whole microsecond (the Redis store's resolution).
var overSteps = func() []overStep {
	s := time.Second
	read := func(at time.Duration) overStep { return overStep{At: at, Act: limit.Read, Units: 1} }
	steps := []overStep{
		{At: 1 * s, Act: limit.Take, Units: 4, Allow: true},
		{At: 1 * s, Act: limit.Defer, Units: 1, Allow: true},
		{At: 1 * s, Act: limit.Charge, Units: 9},
		read(1 * s), read(2 * s),
		{At: 3 * s, Act: limit.Charge, Units: 5},
		read(3 * s),
		{At: 4 * s, Act: limit.Take, Units: 1},
	}
	for _, at := range []time.Duration{5500 * time.Millisecond, 9 * s, 10 * s, 11 * s, 11*s + time.Microsecond, 12 * s, 13*s + time.Microsecond, 15 * s, 19 * s, 30 * s} {
		steps = append(steps, read(at))
	}
	steps = append(steps, overStep{At: 40 * s, Act: limit.Charge, Units: 25}, read(40*s), read(45*s), read(50*s), read(90*s))
	return steps
}()

// Over checks what a Read says of a limit that charges took past it
// (Result.Over), for every algorithm, a bucket of a smaller burst and a
// calendar day: a fresh memory store runs the steps of overSteps, and
// each read's Over and Remaining there must be what the check counts
// itself (overCount: Over the count beyond the capacity, Remaining what
// is left of it); the store newStore returns runs them too and must
// give every call the memory store's Result. newStore returns a fresh
// store and a function that sets the instant it decides at (a store
// that decides at the now it is given can ignore it).
func Over(t *testing.T, newStore func(t *testing.T, now time.Time) (limit.Store, func(time.Time))) {
	t.Helper()
	for _, c := range overCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mem, err := limit.NewMemory(limit.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			s, setNow := newStore(t, T0)
			key := "app|/over|" + c.name
			cap := c.p.Capacity()
			var counted []overUnits
			for i, st := range overSteps {
				now := T0.Add(st.At)
				q := []limit.Request{{Key: key, Params: &c.p, Act: st.Act, Cost: st.Units}}
				want := make([]limit.Result, 1)
				okMem, err := mem.Allow(context.Background(), now, q, want)
				if err != nil {
					t.Fatalf("step %d (%s of %d at +%v): memory: %v", i+1, st.Act, st.Units, st.At, err)
				}
				setNow(now)
				got := make([]limit.Result, 1)
				ok, err := s.Allow(context.Background(), now, q, got)
				if err != nil {
					t.Fatalf("step %d (%s of %d at +%v): %v", i+1, st.Act, st.Units, st.At, err)
				}
				where := fmt.Sprintf("step %d (%s of %d at +%v)", i+1, st.Act, st.Units, st.At)
				if ok != okMem || !sameResult(got[0], want[0]) {
					t.Errorf("%s: got %v %+v, want the memory store's %v %+v", where, ok, got[0], okMem, want[0])
				}
				switch st.Act {
				case limit.Take, limit.Defer:
					if okMem != st.Allow {
						t.Fatalf("%s on the memory store: admitted %v, want %v: %+v", where, okMem, st.Allow, want[0])
					}
					if okMem && st.Act == limit.Take {
						counted = append(counted, overUnits{st.At, st.Units})
					}
				case limit.Charge:
					counted = append(counted, overUnits{st.At, st.Units})
				case limit.Read:
					n := overCount(c, counted, st.At)
					wantOver, wantRem := max(n-cap, 0), max(cap-n, 0)
					if !okMem || want[0].Over != wantOver || want[0].Remaining != wantRem {
						t.Errorf("%s on the memory store, %d counted: got %v, over %d, remaining %d; want true, over %d, remaining %d",
							where, n, okMem, want[0].Over, want[0].Remaining, wantOver, wantRem)
					}
				}
			}
		})
	}
}

// sameResult reports whether a and b are the same Result but for their
// durations' parts below a microsecond, the Redis store's resolution (a
// sliding_log admission stops counting a nanosecond after its window
// in memory, a microsecond after it on Redis).
func sameResult(a, b limit.Result) bool {
	near := func(x, y time.Duration) bool { return x-y < time.Microsecond && y-x < time.Microsecond }
	return near(a.Reset, b.Reset) && near(a.RetryAfter, b.RetryAfter) && near(a.Delay, b.Delay) &&
		a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining && a.Over == b.Over
}
