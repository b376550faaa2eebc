package stores

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// BenchmarkFleetSlowRedis measures what --redis-timeout gives a fleet of
// three gateways (default flags otherwise, each having seen the fleet)
// whose Redis answers every reply after a fixed delay: the decisions made
// locally per 1,000 requests on a key whose limit is not reached (the
// first 900 requests after Redis slowed, then 900 more), and on
// a key limited to 100 per 600s, hammered by 30 connections, what the
// fleet admitted against the bound docs/fleet.md states. Run it with
// -benchtime=1x; the figures are the reported metrics (docs/fleet.md,
// "When Redis fails").
func BenchmarkFleetSlowRedis(b *testing.B) {
	srv := redistest.Start(b)
	// The timeouts compared: the default (the wait adapts from 25ms up to
	// 250ms), and fixed waits of 25ms (the default before it adapted) and
	// 100ms.
	for _, timeout := range []time.Duration{0, 25 * time.Millisecond, 100 * time.Millisecond} {
		for _, delay := range []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 50 * time.Millisecond, 80 * time.Millisecond} {
			name := fmt.Sprintf("timeout=%s/delay=%s", timeoutName(timeout), delay)
			b.Run(name, func(b *testing.B) {
				for i := range b.N {
					paths := []*redistest.Path{redistest.NewPath(b, srv), redistest.NewPath(b, srv), redistest.NewPath(b, srv)}
					gws := startFleetWith(b, srv, paths, func(cfg *Config) {
						if timeout != 0 {
							cfg.RedisTimeout, cfg.RedisMaxTimeout = timeout, timeout
						}
					})
					for _, g := range gws {
						eventually.True(b, 10*time.Second, g.st.redis.FleetSeen, "a gateway did not see the fleet")
					}
					for _, g := range gws {
						g.path.SetDelay(func() time.Duration { return delay })
					}
					open := &limit.Params{Algorithm: "sliding_window", Limit: limit.MaxLimit, Window: 600 * time.Second, Precision: 10}
					key := fmt.Sprintf("timeout|/%s/%d", name, i)
					// The first requests after Redis slowed, then as many
					// more.
					_, first, total := hammerVerdicts(gws, open, key+"/open", 30, 30)
					_, local, _ := hammerVerdicts(gws, open, key+"/open", 30, 30)
					const lim = 100
					p := &limit.Params{Algorithm: "sliding_window", Limit: lim, Window: 600 * time.Second, Precision: 10}
					admitted, _, _ := hammerVerdicts(gws, p, key+"/100", 30, 20)
					// All of a key's traffic through one gateway: under
					// the fail mode it admits only its share.
					one, _, _ := hammerVerdicts(gws[:1], p, key+"/one", 10, 20)
					bound := int64(lim)
					for _, g := range gws {
						bound += int64(math.Ceil(g.st.local.(*fleetShare).share()*lim - 1e-9))
					}
					b.ReportMetric(1000*float64(first)/float64(total), "local/1000-first")
					b.ReportMetric(1000*float64(local)/float64(total), "local/1000-then")
					b.ReportMetric(float64(admitted), "admitted/100")
					b.ReportMetric(float64(bound), "bound")
					b.ReportMetric(float64(one), "one-gateway/100")
				}
			})
		}
	}
}

func timeoutName(d time.Duration) string {
	if d == 0 {
		return "adaptive"
	}
	return d.String() + "-fixed"
}

// hammerVerdicts sends conns × each requests for one key, spread over
// gws, and returns how many were admitted, how many were decided
// locally, and how many were sent.
func hammerVerdicts(gws []*fleetGW, p *limit.Params, key string, conns, each int) (admitted, local, total int64) {
	var a, l, n atomic.Int64
	var wg sync.WaitGroup
	for c := range conns {
		g := gws[c%len(gws)]
		wg.Go(func() {
			res := make([]limit.Result, 1)
			for range each {
				reqs := []limit.Request{{Key: key, Params: p}}
				ok, v, _ := g.fo.Allow(context.Background(), time.Now(), reqs, res, func(int) *limit.Params { return p })
				n.Add(1)
				if v == failmode.LocalDecided {
					l.Add(1)
				}
				if ok && (v == failmode.StoreDecided || v == failmode.LocalDecided) {
					a.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), l.Load(), n.Load()
}
