package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
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

// callerTags are limit.CallerTag's values, in order.
var callerTags = func() (t [limit.CallerBuckets]string) {
	for i := range t {
		t[i] = fmt.Sprintf("~%02d", i)
	}
	return t
}()
