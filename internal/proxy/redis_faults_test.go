package proxy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// redisFaultRules have a small limit to watch the decisions by (20 on Redis, 2
// locally with the default local share), a large one for the steady load,
// and a per-IP limit of 3 (1 locally) for unknown callers, to show that
// Redis counts again after the fault.
const redisFaultRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/small
        limit: 20
        unit: 1h
      - api: /v1
        limit: 100000
        unit: 1h
  - appId: "*"
    limits:
      - api: /
        limit: 3
        unit: 1h
`

// Who decided a request, told by its answer.
const (
	byRedis  = "redis"
	byOpen   = "fail_open"
	byClosed = "fail_closed"
	byLocal  = "local"
)

// decidedBy tells who decided rec, a request whose limit on Redis is
// limit: Redis (the limit's own headers), this gateway's memory (the
// local share's), fail open (admitted with no limit headers) or fail
// closed (503 limiter_unavailable).
func decidedBy(rec *httptest.ResponseRecorder, limit int) string {
	switch h := rec.Header().Get("X-RateLimit-Limit"); {
	case rec.Code == 503 && strings.Contains(rec.Body.String(), "limiter_unavailable"):
		return byClosed
	case rec.Code == 200 && h == "":
		return byOpen
	case h == fmt.Sprint(limit):
		return byRedis
	case h == fmt.Sprint((limit+9)/10):
		return byLocal
	}
	return fmt.Sprintf("unknown (%d, X-RateLimit-Limit %q)", rec.Code, rec.Header().Get("X-RateLimit-Limit"))
}

// failDecision is who decides a request Redis cannot decide in mode.
func failDecision(mode failmode.Mode) string {
	return map[failmode.Mode]string{failmode.Open: byOpen, failmode.Closed: byClosed, failmode.Local: byLocal}[mode]
}

// redisFault is one fault of the matrix: inject starts it, and returns
// when it is over (Redis is back); during runs the test's requests while
// the fault is in force, if it lasts.
type redisFault struct {
	name string
	// transparent reports whether the fault must not reach a request:
	// no request is decided by the fail mode.
	transparent bool
	// inject makes the fault and calls during while it lasts: during
	// sends requests, and reports whether one of them so far was decided
	// by the fail mode.
	inject func(t *testing.T, srv *redistest.Server, during func() bool)
}

var redisFaults = []redisFault{
	{name: "killed", inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		srv.Stop()
		during()
		srv.Restart()
	}},
	{name: "paused", inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		srv.Pause()
		during()
		srv.Resume()
	}},
	{name: "debug sleep", inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		slept := make(chan error, 1)
		go func() { slept <- srv.Client().Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
		// DEBUG SLEEP answers when it is over; a PING meanwhile times out.
		probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1, DisableIdentity: true})
		defer probe.Close()
		eventually.True(t, 10*time.Second, func() bool {
			return probe.Ping(context.Background()).Err() != nil
		}, "Redis still answers after DEBUG SLEEP")
		// On a loaded machine a PING can time out before the sleep
		// begins: the requests go on until one meets the sleep, or the
		// sleep is over (and the test then finds none decided by the
		// fail mode).
		for !during() && len(slept) == 0 {
		}
		if err := <-slept; err != nil {
			t.Fatalf("DEBUG SLEEP: %v", err)
		}
	}},
	{name: "restarted", inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		srv.Restart()
	}},
	{name: "script flush", transparent: true, inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		// The store calls its function library where it can, and the
		// script where it cannot: both go.
		if err := srv.Client().ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Client().FunctionFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "client kill", transparent: true, inject: func(t *testing.T, srv *redistest.Server, during func() bool) {
		if err := srv.Client().Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal").Err(); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestRedisFaults runs each fault of redisFaults under each fail mode,
// through the handler, with a steady load of two callers: while the fault
// lasts, the requests Redis cannot decide are decided as the fail mode
// says and no other way; faults that need not reach a request (SCRIPT
// FLUSH, CLIENT KILL) reach none; and once Redis is back, it decides again
// and its counters hold the limits. The time from the fault's end to
// Redis's first decision is logged.
func TestRedisFaults(t *testing.T) {
	t.Parallel()
	for _, mode := range []failmode.Mode{failmode.Open, failmode.Closed, failmode.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			for i, f := range redisFaults {
				t.Run(f.name, func(t *testing.T) {
					testRedisFault(t, mode, f, fmt.Sprintf("198.51.%d.%d", mode, i))
				})
			}
		})
	}
}

func testRedisFault(t *testing.T, mode failmode.Mode, f redisFault, ip string) {
	srv := redistest.Start(t)
	// A timeout far above a loaded machine's Redis latency, and far below
	// DEBUG SLEEP's 2s. A fault that must not reach a request has a
	// minute: after SCRIPT FLUSH a call sends the whole script again
	// (EVAL), which took more than 500ms under load.
	timeout := 500 * time.Millisecond
	if f.transparent {
		timeout = time.Minute
	}
	g := newRedisGW(t, redisFaultRules, srv, mode, timeout)
	redistest.Ready(t, g.red)

	// The steady load.
	var (
		mu         sync.Mutex
		background = map[string]int{}
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				by := decidedBy(g.do("GET", "/v1/x", "app-1"), 100000)
				mu.Lock()
				background[by]++
				mu.Unlock()
			}
		})
	}
	stopLoad := func() {
		if stop != nil {
			close(stop)
			wg.Wait()
			stop = nil
		}
	}
	defer stopLoad()
	eventually.True(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return background[byRedis] >= 20
	}, "the load is not decided by Redis before the fault: %v", background)
	errs0 := metric(g.metrics, "gateway_store_errors_total")

	// The fault, and the requests while it lasts.
	during := map[string]int{}
	smallAdmitted := 0
	fail := failDecision(mode)
	f.inject(t, srv, func() bool {
		for range 8 {
			rec := g.do("GET", "/v1/small", "app-1")
			during[decidedBy(rec, 20)]++
			if rec.Code == 200 {
				smallAdmitted++
			}
		}
		return during[fail] > 0
	})
	back := time.Now()

	// Redis decides again, and its counter holds the limit of 3. The
	// probe is a new caller each time: the load's hot key may be admitted
	// from this gateway's leases (docs/fleet.md, "Leases") without Redis.
	probe := 0
	eventually.True(t, 10*time.Second, func() bool {
		probe++
		return decidedBy(g.from(fmt.Sprintf("192.0.2.%d", probe%250), "/anything", ""), 3) == byRedis
	}, "Redis does not decide again after the fault")
	took := time.Since(back)
	for i := range 4 {
		rec := g.from(ip, "/anything", "")
		want := 200
		if i == 3 {
			want = 429
		}
		if by := decidedBy(rec, 3); rec.Code != want || by != byRedis {
			t.Errorf("caller %s's request %d after the fault: got %d decided by %s, want %d decided by Redis", ip, i+1, rec.Code, by, want)
		}
	}
	stopLoad()
	errs := metric(g.metrics, "gateway_store_errors_total") - errs0
	t.Logf("Redis decides again %v after the fault ended; during it: %v; the load: %v; %v store errors",
		took, during, background, errs)

	for by, n := range background {
		if by != byRedis && (f.transparent || by != fail) {
			t.Errorf("the load: %d requests decided by %s, want only by Redis%s", n, by,
				map[bool]string{false: " or " + fail, true: ""}[f.transparent])
		}
	}
	if f.transparent {
		if errs != 0 {
			t.Errorf("store errors: got %v, want none: the fault must not reach a request", errs)
		}
		return
	}
	for by, n := range during {
		if by != fail && !(f.name == "debug sleep" && by == byRedis) {
			t.Errorf("during the fault: %d requests decided by %s, want %s", n, by, fail)
		}
	}
	if during[fail] == 0 && len(during) > 0 {
		t.Errorf("during the fault: decisions %v, want some by %s", during, fail)
	}
	if mode == failmode.Local && (f.name == "killed" || f.name == "paused") && smallAdmitted != 2 {
		t.Errorf("during the fault: /v1/small admitted %d times, want the local share's 2", smallAdmitted)
	}
}
