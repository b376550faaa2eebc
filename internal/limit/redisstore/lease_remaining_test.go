package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisLeaseRemainingOracle sends one sequence of requests of two
// limits (an app total and a rule), one at a time, through Redis stores
// with leases on one Redis, and the same sequence to a memory store.
//
// Through one gateway, every decision's Allowed and Remaining are the
// memory store's: a decision from a lease adds the tokens the gateway
// holds to the room Redis last reported, and a call made while tokens
// are on their way back to Redis waits for them, so that Redis's answer
// counts them as room. (It did not: Remaining was under-reported by the
// tokens in flight, 48 where the memory store said 54.)
//
// Round-robin through three, five requests at a time, Allowed is the
// memory store's, and Remaining is what this gateway can know: the room
// Redis reported to it plus the tokens it holds. It does not see the
// tokens other gateways hold unspent, nor what they admitted since Redis
// last answered it (docs/fleet.md, "Leases"); the test logs how far it
// was from the memory store's. Five at a time, each gateway sees the
// key's requests one round trip apart, as one gateway does: it leases
// from the rate at which it sees them, and the second of a run is granted
// a lease that the rest can spend. (With one at a time, a loaded
// machine's round trips through the other two could outlast the lease's
// idle time, and its tokens went back unspent; with two at a time, two
// race suites at once made every gateway's rate too low for any lease,
// and the test compared none.)
func TestRedisLeaseRemainingOracle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		for _, gateways := range []int{1, 3} {
			t.Run(alg+"/gateways="+strconv.Itoa(gateways), func(t *testing.T) {
				t.Parallel()
				var gws []*Store
				for range gateways {
					red := newTestRedis(t, Config{URL: srv.URL(), Timeout: 2 * time.Second, DialTimeout: 10 * time.Second})
					if err := red.Ready(context.Background()); err != nil {
						t.Fatal(err)
					}
					// The fleet's size, as its heartbeats would find it:
					// each lease is at most the room / (2 × it).
					red.fleet.size.Store(int64(gateways))
					gws = append(gws, red)
				}
				mem := newTestMemory(t)
				w := quietWindow(time.Hour)
				p := &limit.Params{Algorithm: alg, Limit: 100, Window: w}
				if alg == "sliding_window" {
					p.Precision = 6
				}
				app := &limit.Params{Algorithm: alg, Limit: 60, Window: w, Precision: p.Precision}
				id := alg + strconv.Itoa(gateways)
				reqs := []limit.Request{{Key: "rem-" + id + "|", Params: app}, {Key: "rem-" + id + "|/", Params: p}}
				ctx := context.Background()
				var differ, under, over int64
				for i := range 150 {
					res, want := make([]limit.Result, 2), make([]limit.Result, 2)
					g := i / 5 % len(gws)
					ok, err := gws[g].Allow(ctx, time.Time{}, reqs, res)
					if err != nil {
						t.Fatal(err)
					}
					wok, _ := mem.Allow(ctx, time.Now(), reqs, want)
					if ok != wok {
						t.Errorf("request %d, gateway %d: allowed %v; the memory store: %v", i, g, ok, wok)
					}
					for j := range reqs {
						d := res[j].Remaining - want[j].Remaining
						if d == 0 {
							continue
						}
						differ++
						under, over = max(under, -d), max(over, d)
						if gateways == 1 {
							t.Errorf("request %d, limit %d: remaining %d; the memory store: %d", i, j, res[j].Remaining, want[j].Remaining)
						}
					}
				}
				t.Logf("%d of 300 Remaining differ from the memory store's, by up to %d under and %d over; %+v", differ, under, over, gws[0].Stats())
				var spent int64
				for _, g := range gws {
					spent += g.Stats().LeaseSpent
				}
				if spent == 0 {
					t.Errorf("no request was admitted from a lease: the test compared no lease's Remaining")
				}
			})
		}
	}
}
