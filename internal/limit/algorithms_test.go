package limit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// newState returns a fresh state of p's algorithm, which must be valid.
func newState(t testing.TB, p *Params) State {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", *p, err)
	}
	a, _ := Lookup(p.Algorithm)
	return a.NewState(p)
}

func TestAlgorithmsRegistered(t *testing.T) {
	t.Parallel()
	want := []string{"fixed_window", "leaky_bucket", "sliding_log", "sliding_window", "token_bucket"}
	if got := Algorithms(); !slices.Equal(got, want) {
		t.Errorf("Algorithms(): got %v, want %v", got, want)
	}
}

// TestAlgorithmsReadTheirSettings checks, for every registered algorithm,
// that Validate rejects exactly the optional settings that Reads leaves
// out, and that the message names exactly the algorithms that read it,
// so that a new algorithm cannot make the messages lie.
func TestAlgorithmsReadTheirSettings(t *testing.T) {
	t.Parallel()
	settings := []struct {
		name    string
		setting Setting
		set     func(*Params)
	}{
		{name: "precision", setting: SettingPrecision, set: func(p *Params) { p.Precision = 10 }},
		{name: "burst", setting: SettingBurst, set: func(p *Params) { p.Burst = 5 }},
		{name: "warmup", setting: SettingWarmup, set: func(p *Params) { p.Warmup = time.Second }},
	}
	for _, s := range settings {
		var readers []string
		for _, name := range Algorithms() {
			a, _ := Lookup(name)
			if a.Reads()&s.setting != 0 {
				readers = append(readers, name)
			}
		}
		for _, name := range Algorithms() {
			a, _ := Lookup(name)
			p := Params{Algorithm: name, Limit: 10, Window: time.Second}
			if a.Reads()&SettingPrecision != 0 {
				p.Precision = DefaultPrecision
			}
			s.set(&p)
			err := p.Validate()
			if a.Reads()&s.setting != 0 {
				if err != nil {
					t.Errorf("%s with %s: got %v, want nil", name, s.name, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s with %s: got nil, want an error", name, s.name)
				continue
			}
			msg, prefix := err.Error(), s.name+" applies only to "
			named := strings.Split(strings.TrimPrefix(msg, prefix), " and ")
			slices.Sort(named)
			if !strings.HasPrefix(msg, prefix) || !slices.Equal(named, readers) {
				t.Errorf("%s with %s: got %q, want %q and the readers %v", name, s.name, msg, prefix, readers)
			}
		}
	}
}

// TestNewStateUnvalidated checks that Params that skipped validation
// cannot crash any state.
func TestNewStateUnvalidated(t *testing.T) {
	t.Parallel()
	for _, name := range Algorithms() {
		a, _ := Lookup(name)
		for _, p := range []Params{
			{Limit: 1, Window: time.Second},
			{Limit: 5, Window: 0, Burst: 3},
			{Limit: 5, Window: -time.Second, Warmup: time.Second},
			{Limit: MaxLimit, Window: time.Nanosecond, Burst: MaxLimit, Warmup: 3},
			{Limit: 3, Window: 1 << 62, Burst: MaxLimit},
			{Limit: MaxLimit, Window: 1 << 62, Warmup: -time.Second},
			{Limit: -1, Window: time.Second},
			{Limit: 0, Window: time.Second},
		} {
			p.Algorithm = name
			if name == "sliding_window" {
				p.Precision = 10
			}
			st := a.NewState(&p)
			for _, now := range []int64{0, -1, 1 << 61, -(1 << 61), 5, 5} {
				if st.Decide(now, &p, 1).Allowed {
					st.Commit(now, &p, 1)
				}
				st.UncountedReset(now, &p)
				st.Idle(now, &p)
			}
		}
	}
}

// TestAllowDoesNotAllocateAnyAlgorithm checks that a decision on an
// existing key allocates nothing, for every algorithm, when it admits,
// when it denies, and when the key is locked out.
func TestAllowDoesNotAllocateAnyAlgorithm(t *testing.T) {
	for _, name := range Algorithms() {
		for _, tt := range []struct {
			name  string
			limit int64
			lock  time.Duration
		}{
			{name: "admitted", limit: 5000},
			{name: "denied", limit: 1},
			{name: "locked out", limit: 1, lock: time.Hour},
		} {
			p := Params{Algorithm: name, Limit: tt.limit, Window: time.Second, Lock: tt.lock}
			if name == "sliding_window" {
				p.Precision = DefaultPrecision
			}
			if name == "token_bucket" {
				p.Warmup = time.Second
			}
			m := newTestMemory(t, MemoryConfig{})
			ctx := context.Background()
			reqs := []Request{{Key: "app-1|/v1/user", Params: &p}, {Key: "app-1", Params: &p, Shadow: true}}
			res := make([]Result, len(reqs))
			now := t0
			if _, err := m.Allow(ctx, now, reqs, res); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				now = now.Add(100 * time.Microsecond)
				if _, err := m.Allow(ctx, now, reqs, res); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s %s: allocations per Allow: got %v, want 0", name, tt.name, allocs)
			}
		}
	}
}

// randomBucketParams returns random Params of algorithm: a limit of 1..50,
// a window that is round, odd or tiny, and for the buckets a burst of 0
// (the limit) or 1..3 times the limit.
func randomBucketParams(rng *rand.Rand, algorithm string) *Params {
	p := &Params{Algorithm: algorithm, Limit: 1 + rng.Int64N(50)}
	switch rng.IntN(3) {
	case 0:
		p.Window = []time.Duration{time.Second, 100 * time.Millisecond, time.Minute, 3 * time.Second}[rng.IntN(4)]
	case 1:
		// Rarely a multiple of the limit: T = Window/Limit has a fraction.
		p.Window = time.Duration(1_000_000 + rng.Int64N(5_000_000_000))
	default:
		p.Window = time.Duration(1 + rng.Int64N(20_000))
	}
	if algorithm == "token_bucket" || algorithm == "leaky_bucket" {
		if rng.IntN(3) > 0 {
			p.Burst = 1 + rng.Int64N(3*p.Limit)
		}
	}
	return p
}

// arrivals returns sorted arrival instants over about six windows from
// start, counted in units of unit since the Unix epoch (1ns for the
// memory store, 1µs for Redis): bursts exactly on, one unit before and one
// after the edges where algorithms slip — window edges (absolute multiples
// of Window, and Window from start), sliding-window bucket edges (of the
// bucket width, and of Window/Precision rounded down, which a ring that
// rounded the wrong way would use), refill instants (multiples of
// Window/Limit) — and uniformly random arrivals.
func arrivals(rng *rand.Rand, p *Params, start int64, unit time.Duration) []int64 {
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

// decision is one decision of offer.
type decision struct {
	at      int64
	allowed bool
}

// offer offers arrivals (sorted) to a fresh state of p in order, and
// returns every decision it made, in order, and the admitted instants.
// It adds arrivals of its own: a client that retries exactly RetryAfter
// after a denial, and, after some admissions, arrivals exactly Window and
// Window+1ns later (the edges of a closed interval).
//
// On every decision it checks that:
//   - Remaining is in 0..capacity-1 and true: after an admission that
//     left r, another request at the same instant is admitted if and only
//     if r > 0, and then leaves r-1;
//   - RetryAfter is exact: with no other traffic, the request is admitted
//     RetryAfter later and not 1ns sooner;
//   - if checkReset, Reset is exact: the state is idle (as good as fresh)
//     Reset later and not 1ns sooner.
func offer(t *testing.T, p *Params, arrivals []int64, checkReset bool) (log []decision, admitted []int64) {
	t.Helper()
	st := newState(t, p)
	win := int64(p.Window)
	capacity := p.Limit
	if p.Burst > 0 {
		capacity = p.Burst
	}
	failures := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if failures++; failures <= 5 {
			t.Errorf(format, args...)
		}
	}
	queue := slices.Clone(arrivals)
	added, maxAdded := 0, 4*len(arrivals)
	push := func(at int64) {
		if added < maxAdded {
			i, _ := slices.BinarySearch(queue, at)
			queue = slices.Insert(queue, i, at)
			added++
		}
	}
	var prev Result
	prevAt := int64(-1 << 63)
	for len(queue) > 0 {
		now := queue[0]
		queue = queue[1:]
		r := st.Decide(now, p, 1)
		log = append(log, decision{at: now, allowed: r.Allowed})
		if r.Limit != p.Limit {
			fail("at %d: limit %d, want %d", now, r.Limit, p.Limit)
		}
		if r.Remaining < 0 || r.Remaining >= capacity {
			fail("at %d: remaining %d outside 0..%d", now, r.Remaining, capacity-1)
		}
		if now == prevAt {
			switch {
			case prev.Allowed && r.Allowed != (prev.Remaining > 0):
				fail("at %d: allowed %v right after an admission that left %d", now, r.Allowed, prev.Remaining)
			case prev.Allowed && r.Allowed && r.Remaining != prev.Remaining-1:
				fail("at %d: remaining %d right after an admission that left %d", now, r.Remaining, prev.Remaining)
			case !prev.Allowed && r.Allowed:
				fail("at %d: admitted right after a denial at the same instant", now)
			}
		}
		prev, prevAt = r, now
		if !r.Allowed {
			if r.RetryAfter <= 0 {
				fail("at %d: retry after %v is not positive", now, r.RetryAfter)
				continue
			}
			if !st.Decide(now+int64(r.RetryAfter), p, 1).Allowed {
				fail("at %d: denied after waiting retry after %v", now, r.RetryAfter)
			}
			if st.Decide(now+int64(r.RetryAfter)-1, p, 1).Allowed {
				fail("at %d: admitted 1ns before retry after %v", now, r.RetryAfter)
			}
			if r.Reset < r.RetryAfter {
				fail("at %d: reset %v before retry after %v", now, r.Reset, r.RetryAfter)
			}
			if checkReset && (st.Idle(now+int64(r.Reset)-1, p) || !st.Idle(now+int64(r.Reset), p)) {
				fail("at %d: reset %v of a denial is not when the state becomes idle", now, r.Reset)
			}
			if len(log)%3 == 0 {
				push(now + int64(r.RetryAfter))
			}
			continue
		}
		if r.RetryAfter != 0 {
			fail("at %d: admitted with retry after %v", now, r.RetryAfter)
		}
		st.Commit(now, p, 1)
		admitted = append(admitted, now)
		if checkReset && (st.Idle(now+int64(r.Reset)-1, p) || !st.Idle(now+int64(r.Reset), p)) {
			fail("at %d: reset %v is not when the state becomes idle", now, r.Reset)
		}
		if len(admitted)%4 == 0 {
			push(now + win)
			push(now + win + 1)
		}
	}
	return log, admitted
}

// rateBound checks that admitted (sorted) never holds more than b + t·rate
// admissions in a closed interval of length t, rate = Limit per Window:
// that n·Window ≤ b·Window + t·Limit for every run of n admissions
// spanning t. It returns the first violation found.
func rateBound(admitted []int64, b int64, p *Params) error {
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

// TestRateBound checks the checker on admissions that break the bound and
// that just meet it.
func TestRateBound(t *testing.T) {
	t.Parallel()
	p := &Params{Limit: 2, Window: time.Second} // one per 500ms
	const ms = int64(time.Millisecond)
	tests := []struct {
		name     string
		admitted []int64
		b        int64
		wantErr  bool
	}{
		{name: "burst of b", admitted: []int64{0, 0, 0}, b: 3},
		{name: "burst above b", admitted: []int64{0, 0, 0, 0}, b: 3, wantErr: true},
		{name: "burst then rate", admitted: []int64{0, 0, 500 * ms, 1000 * ms}, b: 2},
		{name: "burst then too fast", admitted: []int64{0, 0, 500 * ms, 1000*ms - 1}, b: 2, wantErr: true},
		{name: "late burst", admitted: []int64{0, 5000 * ms, 5000 * ms, 5000 * ms}, b: 2, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := rateBound(tt.admitted, tt.b, p); (err != nil) != tt.wantErr {
				t.Errorf("rateBound(%v, %d): got %v, want error %v", tt.admitted, tt.b, err, tt.wantErr)
			}
		})
	}
}

// stepAlg runs a step table against a fresh state of p's algorithm.
func stepAlg(t *testing.T, p *Params, steps []step) {
	t.Helper()
	runSteps(t, newState(t, p), p, steps)
}

// TestValidate checks Params.Validate for every algorithm: the message
// users see and the setting it is about (SettingError), which a rule-file
// parser reports the message on.
func TestValidate(t *testing.T) {
	t.Parallel()
	sec := time.Second
	tests := []struct {
		name    string
		p       Params
		want    string // the error, "" for valid
		setting string // the error's SettingError.Setting
	}{
		// Every algorithm.
		{name: "unknown algorithm", p: Params{Algorithm: "nope", Limit: 1, Window: sec},
			want: `unknown algorithm "nope" (known: fixed_window, leaky_bucket, sliding_log, sliding_window, token_bucket)`, setting: "algorithm"},
		{name: "limit too low", p: *swParams(-2, sec, 10), want: "limit -2 is below -1 (use -1 for unlimited, 0 to block)", setting: "limit"},
		{name: "limit too high", p: *fwParams(MaxLimit+1, sec), want: "limit 2147483648 is above the maximum 2147483647", setting: "limit"},
		{name: "zero unit", p: *swParams(1, 0, 10), want: "unit 0s is not positive", setting: "unit"},
		// Longer windows would overflow Reset and RetryAfter.
		{name: "unit too long", p: *fwParams(1, maxSpan+1), want: "unit 876000h0m0.000000001s is longer than 100 years", setting: "unit"},
		{name: "lock", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Lock: time.Minute}},
		{name: "negative lock", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Lock: -sec}, want: "lockSeconds -1 is negative", setting: "lockSeconds"},
		{name: "lock too long", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Lock: maxSpan + sec},
			want: "lockSeconds 3153600001 is longer than 100 years", setting: "lockSeconds"},

		{name: "fixed_window", p: *fwParams(100, time.Minute)},
		{name: "fixed_window with precision", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Precision: 10},
			want: "precision applies only to sliding_window", setting: "precision"},
		{name: "fixed_window with burst", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Burst: 2},
			want: "burst applies only to token_bucket and leaky_bucket", setting: "burst"},
		{name: "fixed_window with warmup", p: Params{Algorithm: "fixed_window", Limit: 1, Window: sec, Warmup: sec},
			want: "warmup applies only to token_bucket", setting: "warmup"},

		{name: "leaky_bucket", p: *lbParams(100, time.Minute, 0)},
		{name: "leaky_bucket with burst", p: *lbParams(100, time.Minute, 10)},
		{name: "leaky_bucket negative burst", p: *lbParams(1, sec, -5), want: "burst -5 is negative (0 means the limit)", setting: "burst"},
		{name: "leaky_bucket with warmup", p: Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Warmup: sec},
			want: "warmup applies only to token_bucket", setting: "warmup"},
		{name: "leaky_bucket with precision", p: Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Precision: 10},
			want: "precision applies only to sliding_window", setting: "precision"},

		{name: "sliding_log", p: *slParams(100, time.Minute)},
		{name: "sliding_log largest limit", p: *slParams(MaxLogLimit, time.Minute)},
		{name: "sliding_log limit above the log's maximum", p: *slParams(MaxLogLimit+1, time.Minute),
			want: "limit 10001 is above 10000, the most sliding_log keeps (it stores every admission: 8 bytes each, per key); use sliding_window for larger limits", setting: "limit"},
		{name: "sliding_log with precision", p: Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Precision: 10},
			want: "precision applies only to sliding_window", setting: "precision"},
		{name: "sliding_log with burst", p: Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Burst: 2},
			want: "burst applies only to token_bucket and leaky_bucket", setting: "burst"},

		{name: "sliding_window", p: *swParams(100, time.Minute, DefaultPrecision)},
		{name: "sliding_window one bucket", p: *swParams(1, sec, 1)},
		{name: "sliding_window max precision", p: *swParams(1, sec, MaxPrecision)},
		{name: "sliding_window 1µs buckets", p: *swParams(1, 10*time.Microsecond, 10)},
		{name: "sliding_window 100 years", p: *swParams(1, maxSpan, 1)},
		{name: "sliding_window precision 0", p: *swParams(1, sec, 0), want: "precision 0 is outside 1..1000", setting: "precision"},
		{name: "sliding_window precision negative", p: *swParams(1, sec, -3), want: "precision -3 is outside 1..1000", setting: "precision"},
		{name: "sliding_window precision too high", p: *swParams(1, sec, 1001), want: "precision 1001 is outside 1..1000", setting: "precision"},
		{name: "sliding_window buckets under 1µs", p: *swParams(1, 9*time.Microsecond, 10),
			want: "unit 9µs split into 10 buckets leaves less than 1µs per bucket; lower the precision or raise the unit", setting: "unit"},
		{name: "sliding_window with burst", p: Params{Algorithm: "sliding_window", Limit: 1, Window: sec, Precision: 10, Burst: 5},
			want: "burst applies only to token_bucket and leaky_bucket", setting: "burst"},

		{name: "token_bucket", p: *tbParams(100, time.Minute, 0, 0)},
		{name: "token_bucket burst and warmup", p: *tbParams(100, time.Minute, 500, time.Minute)},
		{name: "token_bucket largest warmup", p: *tbParams(100, time.Minute, 0, maxWarmup)},
		{name: "token_bucket largest burst", p: *tbParams(1, sec, MaxLimit, 0)},
		{name: "token_bucket negative burst", p: *tbParams(1, sec, -1, 0), want: "burst -1 is negative (0 means the limit)", setting: "burst"},
		{name: "token_bucket burst too large", p: *tbParams(1, sec, MaxLimit+1, 0), want: "burst 2147483648 is above the maximum 2147483647", setting: "burst"},
		{name: "token_bucket negative warmup", p: *tbParams(1, sec, 0, -sec), want: "warmup -1s is negative", setting: "warmup"},
		{name: "token_bucket warmup too long", p: *tbParams(1, sec, 0, maxWarmup+1), want: "warmup 24h0m0.000000001s is longer than 24h0m0s", setting: "warmup"},
		{name: "token_bucket with precision", p: Params{Algorithm: "token_bucket", Limit: 1, Window: sec, Precision: 10},
			want: "precision applies only to sliding_window", setting: "precision"},
		{name: "token_bucket burst refills too slowly", p: *tbParams(1, 24*time.Hour, 40000, 0),
			want: "burst 40000 takes more than 100 years to refill at 1 per 24h0m0s; lower the burst or raise the limit", setting: "burst"},
		{name: "token_bucket unit too long", p: *tbParams(1, maxSpan+1, 0, 0), want: "unit 876000h0m0.000000001s is longer than 100 years", setting: "unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			got, setting := "", ""
			if err != nil {
				got = err.Error()
				var se *SettingError
				if !errors.As(err, &se) {
					t.Fatalf("Validate(%+v): got %T, want a *SettingError", tt.p, err)
				}
				setting = se.Setting
			}
			if got != tt.want || setting != tt.setting {
				t.Errorf("Validate(%+v): got %q about %q, want %q about %q", tt.p, got, setting, tt.want, tt.setting)
			}
		})
	}
}

// TestIdle checks every algorithm's Idle: a state is idle, and may be
// evicted, exactly when it is as good as a fresh one.
func TestIdle(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	tests := []struct {
		name   string
		p      *Params
		counts []time.Duration // instants counted
		at     time.Duration
		want   bool
	}{
		{name: "fixed_window fresh", p: fwParams(3, sec), at: 0, want: true},
		{name: "fixed_window counted", p: fwParams(3, sec), counts: []time.Duration{200 * ms}, at: 0, want: false},
		{name: "fixed_window end of the window", p: fwParams(3, sec), counts: []time.Duration{200 * ms}, at: sec - 1, want: false},
		{name: "fixed_window next window", p: fwParams(3, sec), counts: []time.Duration{200 * ms}, at: sec, want: true},
		{name: "fixed_window clock stepped back", p: fwParams(3, sec), counts: []time.Duration{200 * ms}, at: -time.Hour, want: false},

		{name: "leaky_bucket fresh", p: lbParams(2, sec, 0), at: 0, want: true},
		{name: "leaky_bucket counted", p: lbParams(2, sec, 0), counts: []time.Duration{0, 0}, at: 0, want: false},
		{name: "leaky_bucket not yet empty", p: lbParams(2, sec, 0), counts: []time.Duration{0, 0}, at: sec - 1, want: false},
		{name: "leaky_bucket empty", p: lbParams(2, sec, 0), counts: []time.Duration{0, 0}, at: sec, want: true},

		{name: "sliding_log fresh", p: slParams(3, sec), at: 0, want: true},
		{name: "sliding_log counted", p: slParams(3, sec), counts: []time.Duration{0, 300 * ms}, at: 0, want: false},
		{name: "sliding_log newest still counts", p: slParams(3, sec), counts: []time.Duration{0, 300 * ms}, at: 1300 * ms, want: false},
		{name: "sliding_log all aged out", p: slParams(3, sec), counts: []time.Duration{0, 300 * ms}, at: 1300*ms + 1, want: true},

		{name: "sliding_window fresh", p: swParams(3, sec, 10), at: 0, want: true},
		{name: "sliding_window counted", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: 0, want: false},
		{name: "sliding_window newest bucket not aged out", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: 1600*ms - 1, want: false},
		{name: "sliding_window all aged out", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: 1600 * ms, want: true},
		{name: "sliding_window long after", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: 24 * time.Hour, want: true},
		{name: "sliding_window clock stepped back", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: -time.Hour, want: false},

		{name: "token_bucket fresh", p: tbParams(2, sec, 0, 0), at: 0, want: true},
		{name: "token_bucket not full", p: tbParams(2, sec, 0, 0), counts: []time.Duration{0}, at: 500*ms - 1, want: false},
		{name: "token_bucket full", p: tbParams(2, sec, 0, 0), counts: []time.Duration{0}, at: 500 * ms, want: true},
		// 4 per second with a 1s warm-up: the two requests cost 625ms
		// and 375ms; the bucket is full at 1s with 500ms of coldness,
		// and cold again 500ms later.
		{name: "token_bucket full but warm", p: tbParams(4, sec, 0, sec), counts: []time.Duration{0, 0}, at: sec, want: false},
		{name: "token_bucket nearly cold", p: tbParams(4, sec, 0, sec), counts: []time.Duration{0, 0}, at: 1500*ms - 1, want: false},
		{name: "token_bucket full and cold", p: tbParams(4, sec, 0, sec), counts: []time.Duration{0, 0}, at: 1500 * ms, want: true},
		{name: "token_bucket no warm-up", p: tbParams(4, sec, 0, 0), counts: []time.Duration{0, 0}, at: 500 * ms, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newState(t, tt.p)
			for _, at := range tt.counts {
				now := t0.Add(at).UnixNano()
				if !st.Decide(now, tt.p, 1).Allowed {
					t.Fatalf("count at t0%+v: denied", at)
				}
				st.Commit(now, tt.p, 1)
			}
			if got := st.Idle(t0.Add(tt.at).UnixNano(), tt.p); got != tt.want {
				t.Errorf("Idle(t0%+v): got %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}

// TestUncountedReset checks every algorithm's UncountedReset on fixed
// instants against the Reset that Decide gives the same request, which
// counts it: the uncounted one is the time until the limit is fully
// replenished as it stands, 0 when it is.
func TestUncountedReset(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	sec := time.Second
	tests := []struct {
		name      string
		p         *Params
		counts    []time.Duration // instants counted
		at        time.Duration
		allow     bool          // Decide at at admits
		reset     time.Duration // Decide's Reset at at
		uncounted time.Duration
	}{
		{name: "fixed_window fresh", p: fwParams(3, sec), at: 200 * ms, allow: true, reset: 800 * ms, uncounted: 0},
		{name: "fixed_window counted", p: fwParams(3, sec), counts: []time.Duration{0}, at: 200 * ms, allow: true, reset: 800 * ms, uncounted: 800 * ms},
		{name: "fixed_window next window", p: fwParams(3, sec), counts: []time.Duration{0}, at: sec, allow: true, reset: sec, uncounted: 0},
		{name: "fixed_window denied", p: fwParams(2, sec), counts: []time.Duration{0, 0}, at: 200 * ms, reset: 800 * ms, uncounted: 800 * ms},
		{name: "fixed_window clock stepped back", p: fwParams(3, sec), counts: []time.Duration{0}, at: -100 * ms, allow: true, reset: 1100 * ms, uncounted: 1100 * ms},

		// 100ms buckets, the ring of 11 spans 1.1s.
		{name: "sliding_window fresh", p: swParams(3, sec, 10), at: 550 * ms, allow: true, reset: 1050 * ms, uncounted: 0},
		{name: "sliding_window counted", p: swParams(3, sec, 10), counts: []time.Duration{0}, at: 550 * ms, allow: true, reset: 1050 * ms, uncounted: 550 * ms},
		{name: "sliding_window newest bucket counts", p: swParams(3, sec, 10), counts: []time.Duration{0, 550 * ms}, at: 700 * ms, allow: true, reset: 1100 * ms, uncounted: 900 * ms},
		{name: "sliding_window last instant", p: swParams(3, sec, 10), counts: []time.Duration{0}, at: 1100*ms - 1, allow: true, reset: 1000*ms + 1, uncounted: 1},
		{name: "sliding_window aged out", p: swParams(3, sec, 10), counts: []time.Duration{0}, at: 1100 * ms, allow: true, reset: 1100 * ms, uncounted: 0},
		{name: "sliding_window denied", p: swParams(2, sec, 10), counts: []time.Duration{0, 300 * ms}, at: 550 * ms, reset: 850 * ms, uncounted: 850 * ms},
		{name: "sliding_window clock stepped back", p: swParams(3, sec, 10), counts: []time.Duration{550 * ms}, at: 0, allow: true, reset: 1600 * ms, uncounted: 1600 * ms},

		// An admission at a counts until a+1s, inclusive.
		{name: "sliding_log fresh", p: slParams(3, sec), at: 500 * ms, allow: true, reset: sec + 1, uncounted: 0},
		{name: "sliding_log counted", p: slParams(3, sec), counts: []time.Duration{0, 300 * ms}, at: 500 * ms, allow: true, reset: sec + 1, uncounted: 800*ms + 1},
		{name: "sliding_log last instant", p: slParams(3, sec), counts: []time.Duration{0}, at: sec, allow: true, reset: sec + 1, uncounted: 1},
		{name: "sliding_log aged out", p: slParams(3, sec), counts: []time.Duration{0}, at: sec + 1, allow: true, reset: sec + 1, uncounted: 0},
		{name: "sliding_log denied", p: slParams(2, sec), counts: []time.Duration{0, 300 * ms}, at: 500 * ms, reset: 800*ms + 1, uncounted: 800*ms + 1},

		// One token every 500ms.
		{name: "token_bucket fresh", p: tbParams(2, sec, 0, 0), at: 100 * ms, allow: true, reset: 500 * ms, uncounted: 0},
		{name: "token_bucket counted", p: tbParams(2, sec, 0, 0), counts: []time.Duration{0}, at: 100 * ms, allow: true, reset: 900 * ms, uncounted: 400 * ms},
		{name: "token_bucket full again", p: tbParams(2, sec, 0, 0), counts: []time.Duration{0}, at: 500 * ms, allow: true, reset: 500 * ms, uncounted: 0},
		{name: "token_bucket denied", p: tbParams(2, sec, 0, 0), counts: []time.Duration{0, 0}, at: 100 * ms, reset: 900 * ms, uncounted: 900 * ms},
		// A third of a second per token: full at 333333333⅓ns, and at
		// 666666666⅔ns after one more.
		{name: "token_bucket fractional", p: tbParams(3, sec, 0, 0), counts: []time.Duration{0}, at: 1, allow: true, reset: 666666666, uncounted: 333333333},
		// 4 per second with a 1s warm-up: the two requests cost 625ms
		// and 375ms (TestIdle), a third 250ms.
		{name: "token_bucket warming up", p: tbParams(4, sec, 0, sec), counts: []time.Duration{0, 0}, at: 250 * ms, allow: true, reset: sec, uncounted: 750 * ms},

		{name: "leaky_bucket fresh", p: lbParams(2, sec, 0), at: 100 * ms, allow: true, reset: 500 * ms, uncounted: 0},
		{name: "leaky_bucket counted", p: lbParams(2, sec, 0), counts: []time.Duration{0}, at: 100 * ms, allow: true, reset: 900 * ms, uncounted: 400 * ms},
		{name: "leaky_bucket empty again", p: lbParams(2, sec, 0), counts: []time.Duration{0}, at: 600 * ms, allow: true, reset: 500 * ms, uncounted: 0},
		{name: "leaky_bucket denied", p: lbParams(2, sec, 0), counts: []time.Duration{0, 0}, at: 100 * ms, reset: 900 * ms, uncounted: 900 * ms},
		{name: "leaky_bucket fractional", p: lbParams(3, sec, 3), counts: []time.Duration{0}, at: 1, allow: true, reset: 666666666, uncounted: 333333333},

		{name: "unlimited", p: fwParams(Unlimited, sec), counts: []time.Duration{0}, at: 0, allow: true, reset: 0, uncounted: 0},
		{name: "blocked", p: slParams(0, sec), at: 0, reset: sec, uncounted: sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newState(t, tt.p)
			for _, at := range tt.counts {
				now := t0.Add(at).UnixNano()
				if !st.Decide(now, tt.p, 1).Allowed {
					t.Fatalf("count at t0%+v: denied", at)
				}
				st.Commit(now, tt.p, 1)
			}
			now := t0.Add(tt.at).UnixNano()
			if r := st.Decide(now, tt.p, 1); r.Allowed != tt.allow || r.Reset != tt.reset {
				t.Errorf("Decide(t0%+v): got allowed %v, reset %v; want %v, %v", tt.at, r.Allowed, r.Reset, tt.allow, tt.reset)
			}
			if got := st.UncountedReset(now, tt.p); got != tt.uncounted {
				t.Errorf("UncountedReset(t0%+v): got %v, want %v", tt.at, got, tt.uncounted)
			}
		})
	}
}

// TestUncountedResetIsWhenIdle checks every algorithm's UncountedReset on
// random arrivals: with nothing more counted, the state is as good as
// fresh (Idle) that long after now and not 1ns sooner; it equals the
// Reset of a denial, and is at most that of an admission, which counts
// the request.
func TestUncountedResetIsWhenIdle(t *testing.T) {
	t.Parallel()
	for _, name := range Algorithms() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(12, uint64(len(name))))
			failures := 0
			for c := range 60 {
				p := randomBucketParams(rng, name)
				if name == "sliding_window" {
					p.Precision = 1 + rng.IntN(12)
					p.Window = max(p.Window, time.Duration(p.Precision)*time.Microsecond)
				}
				st := newState(t, p)
				start := t0.UnixNano() + rng.Int64N(int64(p.Window))
				for _, now := range arrivals(rng, p, start, time.Nanosecond) {
					r := st.Decide(now, p, 1)
					u := st.UncountedReset(now, p)
					msg := ""
					switch {
					case u < 0:
						msg = "negative"
					case !r.Allowed && u != r.Reset:
						msg = fmt.Sprintf("not the denial's reset %v", r.Reset)
					case r.Allowed && u > r.Reset:
						msg = fmt.Sprintf("after the admission's reset %v", r.Reset)
					case !st.Idle(now+int64(u), p):
						msg = "not idle then"
					case u > 0 && st.Idle(now+int64(u)-1, p):
						msg = "idle 1ns sooner"
					}
					if msg != "" {
						if failures++; failures <= 3 {
							t.Errorf("%d %+v at %d: uncounted reset %v: %s", c, *p, now, u, msg)
						}
					}
					if r.Allowed {
						st.Commit(now, p, 1)
					}
				}
			}
		})
	}
}
