package redisstore

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestRecentKeys checks the table of keys asked about lately: a key is
// recent for its window after the store asked about it, not before nor
// after, nor when the clock stepped back.
func TestRecentKeys(t *testing.T) {
	t.Parallel()
	r := newRecent()
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		key    string
		after  time.Duration
		window time.Duration
		want   bool
	}{
		{"a", 0, time.Minute, false},
		{"a", 0, time.Minute, true},
		{"b", 0, time.Minute, false},
		{"a", 59 * time.Second, time.Minute, true},
		{"a", 60 * time.Second, time.Minute, true},
		{"a", 61 * time.Second, time.Minute, false},
		{"a", 500 * time.Millisecond, 100 * time.Millisecond, true}, // the same second
		{"a", time.Second, 100 * time.Millisecond, false},
		{"a", -time.Hour, time.Minute, false},
	}
	for i, s := range steps {
		at = at.Add(s.after)
		if got := r.asked(s.key, at, s.window); got != s.want {
			t.Errorf("step %d (%q, %v later, window %v): asked lately %v, want %v", i, s.key, s.after, s.window, got, s.want)
		}
	}
}

// TestRedisProbesNewKeys checks that the usual call on a key the store
// has not asked about lately is spelled "?", and "" within its window
// (redis_short.lua: the script asks whether a "?" key exists first).
func TestRedisProbesNewKeys(t *testing.T) {
	t.Parallel()
	red := newTestRedis(t, Config{URL: "redis://127.0.0.1:1/0"})
	p := &limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10}
	now := time.Now()
	spell := func(key string, at time.Time) any {
		reqs := []limit.Request{{Key: key, Params: p}}
		return red.scriptArgs(at, reqs, "app", nil)[2]
	}
	for _, s := range []struct {
		key  string
		at   time.Time
		want string
	}{
		{"app|/|a", now, "?"},
		{"app|/|a", now.Add(time.Second), ""},
		{"app|/|b", now.Add(time.Second), "?"},
		{"app|/|a", now.Add(2 * time.Minute), "?"},
	} {
		if got := spell(s.key, s.at); got != s.want {
			t.Errorf("%s at %v: %q, want %q", s.key, s.at.Sub(now), got, s.want)
		}
	}
	two := []limit.Request{{Key: "app|/|c", Params: p}, {Key: "app|/|d", Params: p}}
	if args := red.scriptArgs(now, two, "app", nil); args[2] != "" || args[4] != "" {
		t.Errorf("two limits: %q and %q, want the usual call, which the script does not probe", args[2], args[4])
	}
}
