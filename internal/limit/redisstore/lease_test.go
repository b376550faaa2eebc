package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisLeaseHotKey checks that a hot key of a window algorithm is
// decided from leases (how few script calls it takes is logged), and
// never more admitted than Redis counted.
func TestRedisLeaseHotKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second})
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			// A long window, so that no bucket ends during the test: not
			// an hour, which ends on the hour (a fixed window's count
			// starts afresh then), but one that ends no sooner than 10
			// minutes from now (limittest.QuietWindow).
			w := limittest.QuietWindow(time.Hour, 10*time.Minute, time.Now())
			p := &limit.Params{Algorithm: alg, Limit: limit.MaxLimit, Window: w}
			if alg == "sliding_window" {
				p.Precision = 6
			}
			app := &limit.Params{Algorithm: alg, Limit: limit.MaxLimit, Window: 2 * w, Precision: p.Precision}
			reqs := []limit.Request{{Key: "hot-" + alg + "|", Params: app}, {Key: "hot-" + alg + "|/", Params: p}}
			const workers, each = 8, 500
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					res := make([]limit.Result, 2)
					for range each {
						ok, err := red.Allow(ctx, time.Time{}, reqs, res)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			st := red.Stats()
			if admitted.Load() != workers*each {
				t.Fatalf("admitted %d of %d under an unreachable limit", admitted.Load(), workers*each)
			}
			perRequest := float64(st.Calls) / float64(admitted.Load())
			t.Logf("%s: %d script calls for %d requests (%.3f per request), %d tokens leased, %d spent",
				alg, st.Calls, admitted.Load(), perRequest, st.LeaseGranted, st.LeaseSpent)
			// How few calls is a figure for bench/run.sh, which measures
			// it: a lease covers what the key's measured rate uses in 15ms,
			// so a slower machine gets smaller leases. That leases serve
			// the key at all does not depend on its speed.
			if st.LeaseSpent == 0 {
				t.Errorf("no request of %d was admitted from a lease", admitted.Load())
			}
			// Redis counted every admission, and the unspent tokens too.
			for _, q := range reqs {
				if counted := redisCount(t, srv, q); counted < admitted.Load() {
					t.Errorf("%s: Redis counted %d, fewer than the %d admitted", q.Key, counted, admitted.Load())
				}
			}
		})
	}
}

// redisCount returns what Redis has counted against q's key, with one
// more request, asked with leases off.
func redisCount(t *testing.T, srv *redistest.Server, q limit.Request) int64 {
	t.Helper()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, Leases: -1})
	p := *q.Params
	p.Limit = limit.MaxLimit
	res := make([]limit.Result, 1)
	if _, err := red.Allow(context.Background(), time.Time{}, []limit.Request{{Key: q.Key, Params: &p}}, res); err != nil {
		t.Fatal(err)
	}
	return limit.MaxLimit - res[0].Remaining - 1
}

// TestRedisLeaseFleet sends a steady stream at twice the limit through
// three gateways with leases, and checks the promise of leases that a
// machine's speed cannot change: no interval of length unit holds more
// than the limit. What the fleet admits against one memory store of the
// same stream is logged, a figure: it depends on how the machine's load
// spaces the requests around the buckets' ends (the exact counts are
// TestRedisLeaseFleetExact's).
func TestRedisLeaseFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-second stream")
	}
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const (
		gateways = 3
		lim      = 300
		unit     = time.Second
		run      = 3 * time.Second
	)
	p := &limit.Params{Algorithm: "sliding_window", Limit: lim, Window: unit, Precision: 10}
	stores := make([]*Store, gateways)
	for i := range stores {
		stores[i] = newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second,
			FleetID: fmt.Sprintf("lease-%d", i)})
		if err := stores[i].Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second round sees all three
		for _, st := range stores {
			if _, err := st.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// span is an admission: the request was decided between from and to.
	type span struct{ from, to time.Time }
	var (
		mu       sync.Mutex
		offered  []time.Time
		admitted []span
	)
	// Each gateway gets two workers that send at limit/3 per second
	// each: 2 × limit in all.
	interval := unit * gateways / (2 * lim) * 2
	start := time.Now()
	var wg sync.WaitGroup
	for g := range gateways * 2 {
		wg.Go(func() {
			red, res := stores[g%gateways], make([]limit.Result, 1)
			reqs := []limit.Request{{Key: "lease-fleet|/", Params: p}}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for time.Since(start) < run {
				<-tick.C
				from := time.Now()
				ok, err := red.Allow(ctx, time.Time{}, reqs, res)
				to := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				offered = append(offered, from)
				if ok {
					admitted = append(admitted, span{from, to})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	// No interval of length unit holds more than the limit: count the
	// admissions known to lie in [a.from, a.from + unit] for each a.
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].from.Before(admitted[j].from) })
	worst := 0
	for i, a := range admitted {
		n := 0
		for _, b := range admitted[i:] {
			if !b.to.After(a.from.Add(unit)) {
				n++
			}
		}
		worst = max(worst, n)
	}
	if worst > lim {
		t.Errorf("an interval of %s held %d admissions, above the limit %d", unit, worst, lim)
	}

	// The same stream through one memory store.
	sort.Slice(offered, func(i, j int) bool { return offered[i].Before(offered[j]) })
	mem, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	res := make([]limit.Result, 1)
	for _, at := range offered {
		if ok, _ := mem.Allow(ctx, at, []limit.Request{{Key: "lease-fleet|/", Params: p}}, res); ok {
			want++
		}
	}
	var calls int64
	for _, st := range stores {
		s := st.Stats()
		calls += s.Calls
		t.Logf("gateway: %+v", s)
	}
	t.Logf("offered %d, memory admits %d, the fleet admitted %d with %d script calls; busiest interval %d",
		len(offered), want, len(admitted), calls, worst)
	t.Logf("the fleet admitted %.3f of what one memory store admits", float64(len(admitted))/float64(want))
}

// TestRedisLeaseSpendsEveryToken sends more requests than the limit,
// one after the other, through one store with leases: exactly the limit
// is admitted, as by one exact store. A request that finds its lease low
// spends a held token and asks for the next lease alongside; Redis
// denying the next lease must not deny the request.
func TestRedisLeaseSpendsEveryToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, DialTimeout: 10 * time.Second})
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			const lim = 100
			// A window no test outlives: no bucket ends.
			p := &limit.Params{Algorithm: alg, Limit: lim, Window: 1000 * time.Hour}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			reqs := []limit.Request{{Key: "spend-" + alg + "|/", Params: p}}
			res := make([]limit.Result, 1)
			admitted := 0
			for i := range 150 {
				ok, err := red.Allow(ctx, time.Time{}, reqs, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				} else if res[0].Remaining > 0 {
					t.Errorf("request %d denied with %d remaining", i, res[0].Remaining)
				}
			}
			st := red.Stats()
			t.Logf("%+v", st)
			if admitted != lim {
				t.Errorf("admitted %d of 150, want exactly %d", admitted, lim)
			}
		})
	}
}

// TestRedisLeaseSameBucketLate checks that a lease of the bucket the
// gateway already holds adds to it, however late the call that brought
// it reached Redis: the gateway's estimate of the bucket's end moves by
// the call's latency, the bucket does not. Here every call before the
// first lease starts 3ms late on the gateway's clock (its end looks 3ms
// earlier), and the requests after the limit find no token lost.
func TestRedisLeaseSameBucketLate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			var late atomic.Bool
			late.Store(true)
			clock := func() time.Time {
				if late.Load() {
					return time.Now().Add(-3 * time.Millisecond)
				}
				return time.Now()
			}
			red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, DialTimeout: 10 * time.Second, Now: clock})
			ctx := context.Background()
			if err := red.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			const lim = 1000
			p := &limit.Params{Algorithm: alg, Limit: lim, Window: 1000 * time.Hour}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			reqs := []limit.Request{{Key: "late-" + alg + "|/", Params: p}}
			admitted := 0
			var wg sync.WaitGroup
			var mu sync.Mutex
			for range 4 {
				wg.Go(func() {
					res := make([]limit.Result, 1)
					for range (lim + 100) / 4 {
						ok, err := red.Allow(ctx, time.Time{}, reqs, res)
						if err != nil {
							t.Error(err)
							return
						}
						if red.Stats().LeaseGranted > 0 {
							late.Store(false)
						}
						if ok {
							mu.Lock()
							admitted++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			st := red.Stats()
			t.Logf("%+v", st)
			if st.LeaseGranted == 0 {
				t.Errorf("no lease granted: the test tests nothing")
			}
			if admitted != lim {
				t.Errorf("admitted %d of %d, want exactly %d (tokens expired: %d)", admitted, lim+100, lim, st.LeaseExpired)
			}
		})
	}
}

// TestLeaseGrantSameBucket checks that a grant of the bucket a lease
// holds adds to it whatever its estimate of the bucket's end, and that a
// grant of another bucket replaces it.
func TestLeaseGrantSameBucket(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	ls := newTokenLeases(8, func() int64 { return 0 })
	p := &limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour}
	keys, reqs := []string{"k"}, []limit.Request{{Key: "k", Params: p}}
	res := []limit.Result{{Allowed: true, Limit: 1000, Remaining: 500}}
	ls.get("k", 0)
	steps := []struct {
		name       string
		start      int64
		g          leaseGrant
		wantTokens int64
	}{
		{name: "first", start: 0, g: leaseGrant{n: 11, span: time.Minute, bucket: 7}, wantTokens: 10},
		{name: "same bucket, end 3ms later", start: 3 * ms, g: leaseGrant{n: 11, span: time.Minute, bucket: 7}, wantTokens: 20},
		{name: "same bucket, end 5ms earlier", start: 4 * ms, g: leaseGrant{n: 6, span: time.Minute - 6*time.Millisecond, bucket: 7}, wantTokens: 25},
		{name: "next bucket", start: 5 * ms, g: leaseGrant{n: 4, span: time.Hour, bucket: 8}, wantTokens: 3},
	}
	for _, s := range steps {
		ls.grant(keys, reqs, res, []leaseGrant{s.g}, s.start, 1)
		l := ls.m["k"]
		if l.tokens != s.wantTokens {
			t.Errorf("%s: tokens %d, want %d", s.name, l.tokens, s.wantTokens)
		}
	}
	if got := ls.expired.Load(); got != 25 {
		t.Errorf("expired: got %d, want the 25 of the bucket replaced (no giveBack)", got)
	}
}

// newLeaseFleet returns n stores with leases on srv that know the fleet's
// size. wait is how long a denied request waits for tokens to come
// back: LeaseWait in production, a generous value here, so that a
// loaded machine's slow timers cannot change what is decided.
func newLeaseFleet(t *testing.T, srv *redistest.Server, n int, wait time.Duration) []*Store {
	t.Helper()
	ctx := context.Background()
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = newTestRedis(t, Config{URL: srv.URL(), Timeout: 5 * time.Second, DialTimeout: 10 * time.Second,
			FleetID: fmt.Sprintf("%s-%d", t.Name(), i)})
		stores[i].leaseWait = wait
		if err := stores[i].Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second round sees all of them
		for _, st := range stores {
			if _, err := st.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return stores
}

// TestRedisLeaseFleetExact sends more requests than the limit through
// three gateways with leases, round-robin, and a fresh key's burst of
// exactly the limit from concurrent callers: the fleet admits exactly
// the limit in both, as one exact store does. Tokens a gateway holds are
// spent by its next requests, or given back once it stops using them,
// and a denied request waits for them.
func TestRedisLeaseFleetExact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	params := map[string]*limit.Params{
		// A window no test outlives, and one whose buckets end meanwhile.
		"fixed_window":   {Algorithm: "fixed_window", Limit: 100, Window: 1000 * time.Hour},
		"sliding_window": {Algorithm: "sliding_window", Limit: 100, Window: time.Minute, Precision: 10},
	}
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		p := params[alg]
		t.Run(alg+"/round-robin", func(t *testing.T) {
			t.Parallel()
			// No request here needs to wait: the tokens are spent by the
			// gateways' next requests.
			stores := newLeaseFleet(t, srv, 3, LeaseWait)
			reqs := []limit.Request{{Key: "rr-" + alg + "|/", Params: p}}
			res := make([]limit.Result, 1)
			admitted := 0
			for i := range 3 * int(p.Limit) {
				ok, err := stores[i%3].Allow(ctx, time.Time{}, reqs, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
			}
			for _, st := range stores {
				t.Logf("%+v", st.Stats())
			}
			if admitted != int(p.Limit) {
				t.Errorf("admitted %d of %d, want exactly %d", admitted, 3*p.Limit, p.Limit)
			}
		})
		t.Run(alg+"/burst", func(t *testing.T) {
			t.Parallel()
			stores := newLeaseFleet(t, srv, 3, 10*time.Second)
			reqs := []limit.Request{{Key: "burst-" + alg + "|/", Params: p}}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			// Ten callers, spread over the gateways, send exactly the
			// limit between them.
			const callers = 10
			for c := range callers {
				wg.Go(func() {
					res := make([]limit.Result, 1)
					for range int(p.Limit) / callers {
						ok, err := stores[c%3].Allow(ctx, time.Time{}, reqs, res)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			var granted int64
			for _, st := range stores {
				s := st.Stats()
				granted += s.LeaseGranted
				t.Logf("%+v", s)
			}
			if admitted.Load() != p.Limit {
				t.Errorf("admitted %d of a burst of the limit %d, want all", admitted.Load(), p.Limit)
			}
			if granted == 0 {
				t.Logf("no lease granted: the burst was decided call by call")
			}
		})
		t.Run(alg+"/burst-round-robin", func(t *testing.T) {
			t.Parallel()
			// One request after the other, round-robin: a gateway holding
			// tokens gets no request while another's waits for them, so
			// every denial here waits for a return.
			stores := newLeaseFleet(t, srv, 3, 10*time.Second)
			reqs := []limit.Request{{Key: "rrburst-" + alg + "|/", Params: p}}
			res := make([]limit.Result, 1)
			admitted := 0
			for i := range int(p.Limit) {
				ok, err := stores[i%3].Allow(ctx, time.Time{}, reqs, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
			}
			if admitted != int(p.Limit) {
				t.Errorf("admitted %d of a burst of the limit %d, want all", admitted, p.Limit)
			}
			// And not one more: the fleet is exact both ways.
			if ok, err := stores[0].Allow(ctx, time.Time{}, reqs, res); err != nil || ok {
				t.Errorf("a request past the limit: got %v %v, want denied", ok, err)
			}
		})
	}
}

// TestRedisLeaseFleetTwoLimits sends requests of two limits each (an app
// total and one of two rules) round-robin through three gateways with
// leases: each limit admits exactly what one exact store does, whichever
// binds. Leases are sized by the slower key, and each key is leased only
// what the gateway lacks of it.
func TestRedisLeaseFleetTwoLimits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	tests := []struct {
		name        string
		total, rule int64
		want        [2]int // admitted per rule
	}{
		{name: "rules bind", total: 1000, rule: 100, want: [2]int{100, 100}},
		{name: "total binds", total: 150, rule: 100, want: [2]int{75, 75}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stores := newLeaseFleet(t, srv, 3, LeaseWait)
			app := "two-" + strings.ReplaceAll(tt.name, " ", "-")
			total := &limit.Params{Algorithm: "fixed_window", Limit: tt.total, Window: 1000 * time.Hour}
			rule := &limit.Params{Algorithm: "fixed_window", Limit: tt.rule, Window: 1000 * time.Hour}
			var got [2]int
			res := make([]limit.Result, 2)
			for i := range 600 {
				r := (i / 3) % 2 // each gateway sees both rules
				reqs := []limit.Request{{Key: app + "|", Params: total}, {Key: app + "|/" + strconv.Itoa(r), Params: rule}}
				ok, err := stores[i%3].Allow(ctx, time.Time{}, reqs, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got[r]++
				}
			}
			for _, st := range stores {
				t.Logf("%+v", st.Stats())
			}
			if tt.total >= 2*tt.rule && got != tt.want {
				t.Errorf("admitted per rule %v, want %v", got, tt.want)
			}
			if sum := got[0] + got[1]; sum != tt.want[0]+tt.want[1] {
				t.Errorf("admitted %d in all (%v), want exactly %d", sum, got, tt.want[0]+tt.want[1])
			}
		})
	}
}
