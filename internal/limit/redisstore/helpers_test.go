package redisstore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
)

// newTestMemory returns a memory store, the reference the Redis store's
// decisions are compared with, or fails t.
func newTestMemory(t testing.TB) *limit.Memory {
	t.Helper()
	m, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// algCase is an algorithm and its Params in a benchmark.
type algCase struct {
	name string
	p    *limit.Params
}

// algCases returns Params of every algorithm with lim per second, and of
// token_bucket also with a warm-up.
func algCases(lim int64) []algCase {
	var cs []algCase
	for _, name := range limit.Algorithms() {
		p := &limit.Params{Algorithm: name, Limit: lim, Window: time.Second}
		a, _ := limit.Lookup(name)
		if a.Reads()&limit.SettingPrecision != 0 {
			p.Precision = limit.DefaultPrecision
		}
		cs = append(cs, algCase{name: name, p: p})
		if a.Reads()&limit.SettingWarmup != 0 {
			w := *p
			w.Warmup = time.Second
			cs = append(cs, algCase{name: name + "+warmup", p: &w})
		}
	}
	return cs
}

// quietWindow returns a window of at least least none of whose ends (a
// fixed window's, epoch-aligned multiples of it) falls within least/6 of
// now (limittest.QuietWindow): a test on Redis's clock that counts
// admissions in it sees no window end and start afresh while it runs.
func quietWindow(least time.Duration) time.Duration {
	return limittest.QuietWindow(least, least/6, time.Now())
}

// callerTags are limit.CallerTag's values, in order.
var callerTags = func() (t [limit.CallerBuckets]string) {
	for i := range t {
		t[i] = fmt.Sprintf("~%02d", i)
	}
	return t
}()

// recordGiveBacks makes ls record what it gives back instead of sending
// it to Redis; the function it returns reads the record.
func recordGiveBacks(ls *tokenLeases) func() []leaseReturn {
	var mu sync.Mutex
	var back []leaseReturn
	ls.giveBack = func(b []leaseReturn) {
		mu.Lock()
		back = append(back, b...)
		mu.Unlock()
	}
	return func() []leaseReturn {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(back)
	}
}

// takeFromLeases asks ls's leases for a request of keys under reqs at
// ls's clock, as Allow does, and ends the request: it reports whether
// the leases admitted it.
func takeFromLeases(ls *tokenLeases, keys []string, reqs []limit.Request) bool {
	n := len(reqs)
	ok, claim, _ := ls.take(keys, reqs, make([]limit.Result, n), ls.now(), make([]int64, n), make([]int64, n))
	if claim != nil {
		ls.release(claim)
	}
	return ok
}
