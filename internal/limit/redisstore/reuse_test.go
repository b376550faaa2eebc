package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestReusedNeverMixesParts checks the cache of the strings calls share:
// parts that share a slot each get their own string, every time, and the
// parts asked for again and again are made once.
func TestReusedNeverMixesParts(t *testing.T) {
	var c reused[settingsParts]
	made := 0
	mk := func(s settingsParts) string { made++; return settingsArg(s) }
	parts := func(i int) settingsParts {
		return settingsParts{p: limit.Params{Algorithm: "sliding_window", Limit: int64(i + 1), Window: time.Second,
			Precision: limit.DefaultPrecision}, hashes: i%3 == 0}
	}
	// Sixteen times as many parts as slots, twice: every slot is taken
	// by one and asked for by others.
	for range 2 {
		for i := range 16 * reusedSlots {
			p := parts(i)
			if got, want := c.get(p, mk), settingsArg(p); got != want {
				t.Fatalf("parts %d: got %q, want %q", i, got, want)
			}
			if got, want := c.arg(p, mk), any(settingsArg(p)); got != want {
				t.Fatalf("parts %d as an argument: got %v, want %v", i, got, want)
			}
		}
	}
	made = 0
	for range 100 {
		c.get(parts(7), mk)
		c.arg(parts(7), mk)
	}
	if made != 1 {
		t.Errorf("the same parts, asked for 200 times, were made %d times: want once", made)
	}
}

// TestBudgetArgsOfOneCaller checks that a call with one Overflow key,
// whose argument its rule's calls share, gets the argument that the calls
// with several build (budget.lua): "m budget" and " i n key" for each.
func TestBudgetArgsOfOneCaller(t *testing.T) {
	r := &Store{maxKeys: 1000}
	p := &limit.Params{Algorithm: "sliding_window", Limit: 5, Window: time.Second, Precision: limit.DefaultPrecision}
	for _, tag := range []string{"a", "b"} {
		for _, over := range []string{tag + "|/x|overflow", tag + "|/y|overflow"} {
			for i := range 3 {
				reqs := make([]limit.Request, 3)
				for j := range reqs {
					reqs[j] = limit.Request{Key: tag + "|/k", Params: p}
				}
				reqs[i].Overflow = over
				for range 2 {
					got := r.budgetArgs(nil, reqs, tag)
					k := redisKey(tag, over)
					want := "1 1000 " + strconv.Itoa(i+1) + " " + strconv.Itoa(len(k)) + " " + k
					if len(got) != 1 || got[0] != want {
						t.Fatalf("overflow %q at %d: got %q, want %q", over, i, got, want)
					}
				}
			}
		}
	}
	// Two callers' counters: built each time, in the same shape.
	reqs := []limit.Request{{Key: "a|/k", Params: p, Overflow: "a|/x|overflow"}, {Key: "a|/l", Params: p, Overflow: "a|/y|overflow"}}
	got := r.budgetArgs(nil, reqs, "a")
	k1, k2 := redisKey("a", "a|/x|overflow"), redisKey("a", "a|/y|overflow")
	want := "2 1000 1 " + strconv.Itoa(len(k1)) + " " + k1 + " 2 " + strconv.Itoa(len(k2)) + " " + k2
	if len(got) != 1 || got[0] != want {
		t.Errorf("two overflow keys: got %q, want %q", got, want)
	}
}
