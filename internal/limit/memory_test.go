package limit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func newTestMemory(t testing.TB, cfg MemoryConfig) *Memory {
	t.Helper()
	m, err := NewMemory(cfg)
	if err != nil {
		t.Fatalf("NewMemory(%+v): %v", cfg, err)
	}
	return m
}

func TestNewMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        MemoryConfig
		wantShards int
		wantMax    int64
		wantErr    string
	}{
		{name: "defaults", wantShards: 64, wantMax: 1_000_000},
		{name: "one shard", cfg: MemoryConfig{Shards: 1}, wantShards: 1, wantMax: 1_000_000},
		{name: "rounded up", cfg: MemoryConfig{Shards: 3, MaxKeys: 5}, wantShards: 4, wantMax: 5},
		{name: "power of two", cfg: MemoryConfig{Shards: 128}, wantShards: 128, wantMax: 1_000_000},
		{name: "most shards", cfg: MemoryConfig{Shards: 65536}, wantShards: 65536, wantMax: 1_000_000},
		{name: "too many shards", cfg: MemoryConfig{Shards: 65537}, wantErr: "shards 65537 is outside 1..65536 (0 for the default 64)"},
		{name: "negative shards", cfg: MemoryConfig{Shards: -1}, wantErr: "shards -1 is outside 1..65536 (0 for the default 64)"},
		{name: "negative max keys", cfg: MemoryConfig{MaxKeys: -1}, wantErr: "max keys -1 is negative (0 for the default 1000000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := NewMemory(tt.cfg)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("NewMemory(%+v) error: got %q, want %q", tt.cfg, gotErr, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := len(m.shards); got != tt.wantShards {
				t.Errorf("shards: got %d, want %d", got, tt.wantShards)
			}
			if got := m.mask; got != uint64(tt.wantShards-1) {
				t.Errorf("mask: got %#x, want %#x", got, tt.wantShards-1)
			}
			if m.maxKeys != tt.wantMax {
				t.Errorf("max keys: got %d, want %d", m.maxKeys, tt.wantMax)
			}
		})
	}
}

// call is one Allow in a store step table.
type call struct {
	at   time.Duration
	reqs []Request
	// want is Allow's answer; remaining the Remaining of each Result.
	want      bool
	remaining []int64
	allowed   []bool
}

// runCalls runs calls against m and reports the call that fails.
func runCalls(t *testing.T, m *Memory, calls []call) {
	t.Helper()
	for i, c := range calls {
		res := make([]Result, len(c.reqs))
		got, err := m.Allow(context.Background(), t0.Add(c.at), c.reqs, res)
		if err != nil {
			t.Fatalf("call %d (t0%+v): %v", i, c.at, err)
		}
		if got != c.want {
			t.Errorf("call %d (t0%+v): allowed: got %v, want %v", i, c.at, got, c.want)
		}
		for j := range c.reqs {
			if got, want := res[j].Remaining, c.remaining[j]; got != want {
				t.Errorf("call %d (t0%+v) %s: remaining: got %d, want %d", i, c.at, c.reqs[j].Key, got, want)
			}
			if got, want := res[j].Allowed, c.allowed[j]; got != want {
				t.Errorf("call %d (t0%+v) %s: allowed: got %v, want %v", i, c.at, c.reqs[j].Key, got, want)
			}
		}
	}
}

func TestMemoryAllow(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	total := Request{Key: "app-1", Params: swParams(3, time.Second, 10)}
	api := Request{Key: "app-1|/v1/user", Params: swParams(5, time.Second, 10)}
	shadow := Request{Key: "app-1|/v1/beta", Params: swParams(1, time.Second, 10), Shadow: true}
	with := func(r Request, p *Params) Request { r.Params = p; return r }
	tests := []struct {
		name  string
		calls []call
	}{
		{
			name: "app total denies: the API limit is not counted",
			calls: []call{
				{reqs: []Request{total, api}, want: true, remaining: []int64{2, 4}, allowed: []bool{true, true}},
				{reqs: []Request{total, api}, want: true, remaining: []int64{1, 3}, allowed: []bool{true, true}},
				{reqs: []Request{total, api}, want: true, remaining: []int64{0, 2}, allowed: []bool{true, true}},
				// The API would admit (1 left after); nothing is counted.
				{reqs: []Request{total, api}, want: false, remaining: []int64{0, 2}, allowed: []bool{false, true}},
				{reqs: []Request{total, api}, want: false, remaining: []int64{0, 2}, allowed: []bool{false, true}},
				{reqs: []Request{api}, want: true, remaining: []int64{1}, allowed: []bool{true}},
			},
		},
		{
			name: "API limit denies: the app total is not counted",
			calls: []call{
				{reqs: []Request{with(api, swParams(1, time.Second, 10)), total}, want: true, remaining: []int64{0, 2}, allowed: []bool{true, true}},
				{reqs: []Request{with(api, swParams(1, time.Second, 10)), total}, want: false, remaining: []int64{0, 2}, allowed: []bool{false, true}},
				{reqs: []Request{total}, want: true, remaining: []int64{1}, allowed: []bool{true}},
			},
		},
		{
			name: "shadow limit never denies and is counted only when it admits",
			calls: []call{
				{reqs: []Request{api, shadow}, want: true, remaining: []int64{4, 0}, allowed: []bool{true, true}},
				{at: 500 * ms, reqs: []Request{api, shadow}, want: true, remaining: []int64{3, 0}, allowed: []bool{true, false}},
				{at: 500 * ms, reqs: []Request{api, shadow}, want: true, remaining: []int64{2, 0}, allowed: []bool{true, false}},
				// At 1.1s the request counted at t0 has aged out; the
				// denied ones at 500ms were not counted.
				{at: 1100 * ms, reqs: []Request{shadow}, want: true, remaining: []int64{0}, allowed: []bool{true}},
			},
		},
		{
			name: "shadow admits but the enforced limit denies: nothing counted",
			calls: []call{
				{reqs: []Request{with(api, swParams(1, time.Second, 10))}, want: true, remaining: []int64{0}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(1, time.Second, 10)), shadow}, want: false, remaining: []int64{0, 1}, allowed: []bool{false, true}},
				{reqs: []Request{shadow}, want: true, remaining: []int64{0}, allowed: []bool{true}},
			},
		},
		{
			name: "a new limit keeps the counts",
			calls: []call{
				{reqs: []Request{api}, want: true, remaining: []int64{4}, allowed: []bool{true}},
				{reqs: []Request{api}, want: true, remaining: []int64{3}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(2, time.Second, 10))}, want: false, remaining: []int64{0}, allowed: []bool{false}},
				{reqs: []Request{with(api, swParams(10, time.Second, 10))}, want: true, remaining: []int64{7}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(4, time.Second, 10))}, want: true, remaining: []int64{0}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(4, time.Second, 10))}, want: false, remaining: []int64{0}, allowed: []bool{false}},
			},
		},
		{
			name: "a new window or precision starts afresh",
			calls: []call{
				{reqs: []Request{api}, want: true, remaining: []int64{4}, allowed: []bool{true}},
				{reqs: []Request{api}, want: true, remaining: []int64{3}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(5, 2*time.Second, 10))}, want: true, remaining: []int64{4}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(5, 2*time.Second, 20))}, want: true, remaining: []int64{4}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(5, 2*time.Second, 20))}, want: true, remaining: []int64{3}, allowed: []bool{true}},
			},
		},
		{
			name: "unlimited and blocked",
			calls: []call{
				{reqs: []Request{with(api, swParams(Unlimited, time.Second, 10))}, want: true, remaining: []int64{-1}, allowed: []bool{true}},
				{reqs: []Request{with(api, swParams(0, time.Second, 10)), total}, want: false, remaining: []int64{0, 3}, allowed: []bool{false, true}},
				{reqs: []Request{total}, want: true, remaining: []int64{2}, allowed: []bool{true}},
			},
		},
		{
			name: "more requests than fit on the stack",
			calls: []call{
				{
					reqs: []Request{
						{Key: "a", Params: swParams(1, time.Second, 10)},
						{Key: "b", Params: swParams(2, time.Second, 10)},
						{Key: "c", Params: swParams(3, time.Second, 10)},
						{Key: "d", Params: swParams(4, time.Second, 10)},
						{Key: "e", Params: swParams(5, time.Second, 10)},
						{Key: "f", Params: swParams(6, time.Second, 10)},
					},
					want: true, remaining: []int64{0, 1, 2, 3, 4, 5}, allowed: []bool{true, true, true, true, true, true},
				},
				{
					reqs: []Request{
						{Key: "f", Params: swParams(6, time.Second, 10)},
						{Key: "e", Params: swParams(5, time.Second, 10)},
						{Key: "d", Params: swParams(4, time.Second, 10)},
						{Key: "c", Params: swParams(3, time.Second, 10)},
						{Key: "b", Params: swParams(2, time.Second, 10)},
						{Key: "a", Params: swParams(1, time.Second, 10)},
					},
					want: false, remaining: []int64{5, 4, 3, 2, 1, 0}, allowed: []bool{true, true, true, true, true, false},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCalls(t, newTestMemory(t, MemoryConfig{Shards: 4}), tt.calls)
		})
	}
}

func TestMemoryAllowErrors(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{})
	ctx := context.Background()
	good := Request{Key: "k", Params: swParams(1, time.Second, 10)}
	tests := []struct {
		name    string
		reqs    []Request
		res     int
		wantErr string
		wantIs  error
	}{
		{
			name:    "unknown algorithm",
			reqs:    []Request{good, {Key: "x", Params: &Params{Algorithm: "nope", Limit: 1, Window: time.Second}}},
			wantErr: `unknown algorithm "nope"`,
			wantIs:  ErrUnknownAlgorithm,
		},
		{
			name:    "invalid params",
			reqs:    []Request{good, {Key: "x", Params: swParams(1, time.Second, 0)}},
			wantErr: `limit: key "x": precision 0 is outside 1..1000`,
		},
		{
			name:    "invalid new limit",
			reqs:    []Request{{Key: "k", Params: swParams(MaxLimit+1, time.Second, 10)}},
			wantErr: `limit: key "k": limit 2147483648 is above the maximum 2147483647`,
		},
		{
			name:    "no params",
			reqs:    []Request{{Key: "x"}},
			wantErr: `limit: request for "x" has no params`,
		},
		{
			name:    "short results",
			reqs:    []Request{good, good},
			res:     1,
			wantErr: "limit: 1 results for 2 requests",
		},
	}
	for _, tt := range tests {
		// Sequential: they share m and "k" must exist for some.
		res := make([]Result, len(tt.reqs))
		if tt.res != 0 {
			res = res[:tt.res]
		}
		if _, err := m.Allow(ctx, t0, []Request{good}, make([]Result, 1)); err != nil {
			t.Fatalf("%s: setup: %v", tt.name, err)
		}
		ok, err := m.Allow(ctx, t0, tt.reqs, res)
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%s: error: got %v, want %q", tt.name, err, tt.wantErr)
		}
		if ok {
			t.Errorf("%s: allowed: got true, want false", tt.name)
		}
		if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
			t.Errorf("%s: errors.Is(%v, %v): got false, want true", tt.name, err, tt.wantIs)
		}
	}
	// No key was created for the requests in error.
	if got, want := m.Len(), 1; got != want {
		t.Errorf("Len after errors: got %d, want %d", got, want)
	}
}

func TestMemoryOverflow(t *testing.T) {
	t.Parallel()
	const maxKeys = 10
	m := newTestMemory(t, MemoryConfig{Shards: 8, MaxKeys: maxKeys})
	ctx := context.Background()
	p := swParams(5000, time.Second, 10)
	res := make([]Result, 1)
	for i := range 1000 {
		req := Request{Key: fmt.Sprintf("*|/|10.0.%d.%d", i/256, i%256), Overflow: "*|/|overflow", Params: p}
		if ok, err := m.Allow(ctx, t0, []Request{req}, res); !ok || err != nil {
			t.Fatalf("request %d: got %v, %v; want true, nil", i, ok, err)
		}
	}
	if got, want := m.Len(), maxKeys+1; got != want {
		t.Errorf("keys after 1000 callers: got %d, want %d", got, want)
	}
	// The first 10 callers got their own keys; the other 990 share one.
	if got, want := res[0].Remaining, int64(5000-990); got != want {
		t.Errorf("overflow remaining: got %d, want %d", got, want)
	}
	// A known caller is still counted on its own.
	req := Request{Key: "*|/|10.0.0.1", Overflow: "*|/|overflow", Params: p}
	if _, err := m.Allow(ctx, t0, []Request{req}, res); err != nil {
		t.Fatal(err)
	}
	if got, want := res[0].Remaining, int64(5000-2); got != want {
		t.Errorf("known caller remaining: got %d, want %d", got, want)
	}
	// Configured apps have no overflow key: their keys are created anyway.
	for i := range 5 {
		req := Request{Key: fmt.Sprintf("app-%d|/", i), Params: p}
		if _, err := m.Allow(ctx, t0, []Request{req}, res); err != nil {
			t.Fatal(err)
		}
		if got, want := res[0].Remaining, int64(5000-1); got != want {
			t.Errorf("app-%d remaining: got %d, want %d", i, got, want)
		}
	}
	if got, want := m.Len(), maxKeys+1+5; got != want {
		t.Errorf("keys after 5 apps: got %d, want %d", got, want)
	}
	// Once idle keys are swept, new callers get their own keys again.
	if got, want := m.Sweep(t0.Add(time.Hour)), maxKeys+1+5; got != want {
		t.Errorf("swept: got %d, want %d", got, want)
	}
	req = Request{Key: "*|/|10.9.9.9", Overflow: "*|/|overflow", Params: p}
	if _, err := m.Allow(ctx, t0.Add(time.Hour), []Request{req}, res); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Len(), 1; got != want {
		t.Errorf("keys after sweep and one caller: got %d, want %d", got, want)
	}
}

func TestMemorySweep(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{Shards: 4})
	ctx := context.Background()
	p := swParams(1, time.Second, 10)
	res := make([]Result, 2)
	allow := func(at time.Duration, keys ...string) {
		t.Helper()
		reqs := make([]Request, len(keys))
		for i, k := range keys {
			reqs[i] = Request{Key: k, Params: p}
		}
		if _, err := m.Allow(ctx, t0.Add(at), reqs, res); err != nil {
			t.Fatal(err)
		}
	}
	allow(0, "old")
	allow(0, "old", "denied-only") // "old" denies: "denied-only" exists, empty
	allow(time.Second, "recent")
	tests := []struct {
		at      time.Duration
		evicted int
		keys    int
	}{
		{at: 500 * time.Millisecond, evicted: 1, keys: 2},
		{at: 1100*time.Millisecond - 1, evicted: 0, keys: 2},
		{at: 1100 * time.Millisecond, evicted: 1, keys: 1},
		{at: 2100*time.Millisecond - 1, evicted: 0, keys: 1},
		{at: 2100 * time.Millisecond, evicted: 1, keys: 0},
	}
	for i, tt := range tests {
		if got := m.Sweep(t0.Add(tt.at)); got != tt.evicted {
			t.Errorf("step %d: Sweep(t0+%v): got %d, want %d", i, tt.at, got, tt.evicted)
		}
		if got := m.Len(); got != tt.keys {
			t.Errorf("step %d: Len after Sweep(t0+%v): got %d, want %d", i, tt.at, got, tt.keys)
		}
	}
}

func TestMemoryForget(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{Shards: 2})
	ctx := context.Background()
	p := swParams(3, time.Second, 10)
	res := make([]Result, 1)
	for _, k := range []string{"app-1|/a", "app-1|/b", "app-2|/a", "app-1|/a", "app-2|/a"} {
		if _, err := m.Allow(ctx, t0, []Request{{Key: k, Params: p}}, res); err != nil {
			t.Fatal(err)
		}
	}
	removed := m.Forget(func(key string) bool { return key != "app-1|/b" && !strings.HasPrefix(key, "app-2|") })
	if got, want := removed, 2; got != want {
		t.Errorf("Forget: got %d, want %d", got, want)
	}
	if got, want := m.Len(), 1; got != want {
		t.Errorf("Len: got %d, want %d", got, want)
	}
	for _, tt := range []struct {
		key  string
		want int64
	}{
		{key: "app-1|/a", want: 0}, // kept its two counts
		{key: "app-2|/a", want: 2}, // forgotten: starts afresh
	} {
		if _, err := m.Allow(ctx, t0, []Request{{Key: tt.key, Params: p}}, res); err != nil {
			t.Fatal(err)
		}
		if got := res[0].Remaining; got != tt.want {
			t.Errorf("%s remaining: got %d, want %d", tt.key, got, tt.want)
		}
	}
}

// TestMemoryConcurrent decides from many goroutines at one instant: exactly
// Limit of the requests on a shared key are admitted, and each goroutine's
// own key admits its own limit — also when both limits are in one call.
func TestMemoryConcurrent(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 32
		attempts   = 200
		sharedMax  = 1000
		ownMax     = 20
	)
	tests := []struct {
		name      string
		withOwn   bool
		sharedOK  int64
		perOwnMax int64
	}{
		{name: "shared key", sharedOK: sharedMax},
		{name: "shared and own key", withOwn: true, sharedOK: min(sharedMax, goroutines*ownMax), perOwnMax: ownMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newTestMemory(t, MemoryConfig{Shards: 8})
			shared := swParams(sharedMax, time.Second, 10)
			own := swParams(ownMax, time.Second, 10)
			var admitted atomic.Int64
			perOwn := make([]int64, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					reqs := []Request{{Key: "shared", Params: shared}}
					if tt.withOwn {
						reqs = append(reqs, Request{Key: fmt.Sprintf("own-%d", g), Params: own})
					}
					res := make([]Result, len(reqs))
					for range attempts {
						ok, err := m.Allow(context.Background(), t0, reqs, res)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							admitted.Add(1)
							perOwn[g]++
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != tt.sharedOK {
				t.Errorf("admitted: got %d, want %d", got, tt.sharedOK)
			}
			if tt.withOwn {
				for g, got := range perOwn {
					if got != tt.perOwnMax {
						t.Errorf("goroutine %d admitted: got %d, want %d", g, got, tt.perOwnMax)
					}
				}
			}
			// The shared counter agrees.
			res := make([]Result, 1)
			if _, err := m.Allow(context.Background(), t0, []Request{{Key: "shared", Params: shared}}, res); err != nil {
				t.Fatal(err)
			}
			if got, want := res[0].Remaining, max(sharedMax-tt.sharedOK-1, 0); got != want {
				t.Errorf("shared remaining: got %d, want %d", got, want)
			}
		})
	}
}

// TestMemoryConcurrentDistinctKeys decides from many goroutines on many keys
// spread over the shards, together with Sweep and Forget.
func TestMemoryConcurrentDistinctKeys(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 16
		keys       = 64
		perKey     = 5
	)
	m := newTestMemory(t, MemoryConfig{Shards: 16})
	p := swParams(perKey, time.Second, 10)
	var admitted [goroutines][keys]int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			res := make([]Result, 1)
			for range 2 * perKey {
				for k := range keys {
					req := Request{Key: fmt.Sprintf("g%d|k%d", g, k), Params: p}
					ok, err := m.Allow(context.Background(), t0, []Request{req}, res)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						admitted[g][k]++
					}
				}
			}
		})
	}
	// Sweeps and forgets that remove nothing may run alongside.
	wg.Go(func() {
		for range 20 {
			m.Sweep(t0)
			m.Forget(func(string) bool { return true })
		}
	})
	wg.Wait()
	for g := range goroutines {
		for k := range keys {
			if got := admitted[g][k]; got != perKey {
				t.Errorf("g%d|k%d admitted: got %d, want %d", g, k, got, perKey)
			}
		}
	}
	if got, want := m.Len(), goroutines*keys; got != want {
		t.Errorf("Len: got %d, want %d", got, want)
	}
}

func TestMemoryAllowDoesNotAllocate(t *testing.T) {
	m := newTestMemory(t, MemoryConfig{})
	ctx := context.Background()
	total := Request{Key: "app-1", Params: swParams(1_000_000, time.Second, 10)}
	api := Request{Key: "app-1|/v1/user", Params: swParams(1_000_000, time.Second, 10)}
	unknown := Request{Key: "*|/|10.0.0.1", Overflow: "*|/|overflow", Params: swParams(1_000_000, time.Second, 10)}
	tests := []struct {
		name string
		reqs []Request
	}{
		{name: "one limit", reqs: []Request{api}},
		{name: "app total and API", reqs: []Request{total, api}},
		{name: "unknown caller", reqs: []Request{unknown}},
		{name: "four limits", reqs: []Request{total, api, unknown, {Key: "x", Params: swParams(5, time.Second, 10)}}},
	}
	for _, tt := range tests {
		res := make([]Result, len(tt.reqs))
		now := t0
		if _, err := m.Allow(ctx, now, tt.reqs, res); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			if _, err := m.Allow(ctx, now, tt.reqs, res); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: allocations per Allow: got %v, want 0", tt.name, allocs)
		}
	}
}

func TestInsertSorted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []uint32
		want []uint32
	}{
		{name: "empty"},
		{name: "one", in: []uint32{5}, want: []uint32{5}},
		{name: "sorted with duplicates", in: []uint32{1, 1, 2, 3, 3}, want: []uint32{1, 2, 3}},
		{name: "reversed", in: []uint32{9, 7, 7, 3, 0}, want: []uint32{0, 3, 7, 9}},
		{name: "mixed", in: []uint32{4, 1, 8, 1, 4, 2, 8, 0}, want: []uint32{0, 1, 2, 4, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []uint32
			for _, s := range tt.in {
				got = insertSorted(got, s)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("insertSorted of %v: got %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestShardFillsACacheLine(t *testing.T) {
	t.Parallel()
	if got, want := unsafe.Sizeof(shard{}), uintptr(64); got != want {
		t.Errorf("shard size: got %d, want %d", got, want)
	}
}

// lockCall is one Allow in a lockout step table: want is Allow's answer,
// and for each request whether it was allowed and its RetryAfter.
type lockCall struct {
	at         time.Duration
	reqs       []Request
	want       bool
	allowed    []bool
	retryAfter []time.Duration
}

func TestMemoryLockout(t *testing.T) {
	t.Parallel()
	sec := time.Second
	fw := func(limit int64, window, lock time.Duration) *Params {
		return &Params{Algorithm: "fixed_window", Limit: limit, Window: window, Lock: lock}
	}
	api := func(p *Params) Request { return Request{Key: "app-1|/v1/user", Params: p} }
	total := func(p *Params) Request { return Request{Key: "app-1", Params: p} }
	tests := []struct {
		name  string
		calls []lockCall
	}{
		{
			name: "locked out after a denial, for the lock's length",
			calls: []lockCall{
				{reqs: []Request{api(fw(2, sec, 5*sec))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{reqs: []Request{api(fw(2, sec, 5*sec))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{reqs: []Request{api(fw(2, sec, 5*sec))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{5 * sec}},
				// A new window would admit; the lockout does not, and a
				// denial during it does not extend it.
				{at: sec, reqs: []Request{api(fw(2, sec, 5*sec))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{4 * sec}},
				{at: 5*sec - time.Millisecond, reqs: []Request{api(fw(2, sec, 5*sec))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{time.Millisecond}},
				{at: 5 * sec, reqs: []Request{api(fw(2, sec, 5*sec))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
			},
		},
		{
			name: "a lock shorter than the algorithm's wait",
			calls: []lockCall{
				{reqs: []Request{api(fw(1, 10*sec, sec))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{reqs: []Request{api(fw(1, 10*sec, sec))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{10 * sec}},
				// Over, but the window still denies: locked again.
				{at: sec, reqs: []Request{api(fw(1, 10*sec, sec))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{9 * sec}},
				{at: 10 * sec, reqs: []Request{api(fw(1, 10*sec, sec))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
			},
		},
		{
			name: "shadow limits do not lock out",
			calls: []lockCall{
				{reqs: []Request{{Key: "k", Params: fw(1, sec, time.Hour), Shadow: true}}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{reqs: []Request{{Key: "k", Params: fw(1, sec, time.Hour), Shadow: true}}, want: true, allowed: []bool{false}, retryAfter: []time.Duration{sec}},
				{at: sec, reqs: []Request{{Key: "k", Params: fw(1, sec, time.Hour), Shadow: true}}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
			},
		},
		{
			name: "a lockout concerns its own counter",
			calls: []lockCall{
				{reqs: []Request{total(fw(2, time.Hour, time.Hour)), api(fw(1, 10*sec, 0))}, want: true, allowed: []bool{true, true}, retryAfter: []time.Duration{0, 0}},
				// The rule denies; it has no lock, and the total admitted.
				{reqs: []Request{total(fw(2, time.Hour, time.Hour)), api(fw(1, 10*sec, 0))}, want: false, allowed: []bool{true, false}, retryAfter: []time.Duration{0, 10 * sec}},
				{at: 10 * sec, reqs: []Request{total(fw(2, time.Hour, time.Hour)), api(fw(1, 10*sec, 0))}, want: true, allowed: []bool{true, true}, retryAfter: []time.Duration{0, 0}},
				// The total denies and is locked; the rule is not.
				{at: 20 * sec, reqs: []Request{total(fw(2, time.Hour, time.Hour)), api(fw(1, 10*sec, 0))}, want: false, allowed: []bool{false, true}, retryAfter: []time.Duration{time.Hour, 0}},
				{at: 30 * sec, reqs: []Request{api(fw(1, 10*sec, 0))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{at: 30 * sec, reqs: []Request{total(fw(2, time.Hour, time.Hour))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{time.Hour - 10*sec}},
			},
		},
		{
			name: "a reload that drops the lock lifts it",
			calls: []lockCall{
				{reqs: []Request{api(fw(1, sec, time.Hour))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
				{reqs: []Request{api(fw(1, sec, time.Hour))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{time.Hour}},
				// Another lock length: the lockout runs to its end.
				{at: sec, reqs: []Request{api(fw(1, sec, time.Minute))}, want: false, allowed: []bool{false}, retryAfter: []time.Duration{time.Hour - sec}},
				{at: sec, reqs: []Request{api(fw(1, sec, 0))}, want: true, allowed: []bool{true}, retryAfter: []time.Duration{0}},
			},
		},
		{
			name: "every algorithm locks out",
			calls: []lockCall{
				{reqs: []Request{
					{Key: "a", Params: &Params{Algorithm: "sliding_window", Limit: 1, Window: sec, Precision: 10, Lock: time.Minute}},
					{Key: "b", Params: &Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "c", Params: &Params{Algorithm: "token_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "d", Params: &Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
				}, want: true, allowed: []bool{true, true, true, true}, retryAfter: []time.Duration{0, 0, 0, 0}},
				{at: sec / 2, reqs: []Request{
					{Key: "a", Params: &Params{Algorithm: "sliding_window", Limit: 1, Window: sec, Precision: 10, Lock: time.Minute}},
					{Key: "b", Params: &Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "c", Params: &Params{Algorithm: "token_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "d", Params: &Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
				}, want: false, allowed: []bool{false, false, false, false}, retryAfter: []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute}},
				{at: time.Minute, reqs: []Request{
					{Key: "a", Params: &Params{Algorithm: "sliding_window", Limit: 1, Window: sec, Precision: 10, Lock: time.Minute}},
					{Key: "b", Params: &Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "c", Params: &Params{Algorithm: "token_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "d", Params: &Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
				}, want: false, allowed: []bool{false, false, false, false}, retryAfter: []time.Duration{time.Second / 2, time.Second / 2, time.Second / 2, time.Second / 2}},
				{at: time.Minute + sec/2, reqs: []Request{
					{Key: "a", Params: &Params{Algorithm: "sliding_window", Limit: 1, Window: sec, Precision: 10, Lock: time.Minute}},
					{Key: "b", Params: &Params{Algorithm: "sliding_log", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "c", Params: &Params{Algorithm: "token_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
					{Key: "d", Params: &Params{Algorithm: "leaky_bucket", Limit: 1, Window: sec, Lock: time.Minute}},
				}, want: true, allowed: []bool{true, true, true, true}, retryAfter: []time.Duration{0, 0, 0, 0}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newTestMemory(t, MemoryConfig{Shards: 4})
			for i, c := range tt.calls {
				res := make([]Result, len(c.reqs))
				got, err := m.Allow(context.Background(), t0.Add(c.at), c.reqs, res)
				if err != nil {
					t.Fatalf("call %d (t0%+v): %v", i, c.at, err)
				}
				if got != c.want {
					t.Errorf("call %d (t0%+v): allowed: got %v, want %v", i, c.at, got, c.want)
				}
				for j, r := range res {
					if r.Allowed != c.allowed[j] || r.RetryAfter != c.retryAfter[j] {
						t.Errorf("call %d (t0%+v) %s: got allowed %v, retry after %v; want %v, %v",
							i, c.at, c.reqs[j].Key, r.Allowed, r.RetryAfter, c.allowed[j], c.retryAfter[j])
					}
					if !r.Allowed && r.Remaining != 0 {
						t.Errorf("call %d (t0%+v) %s: remaining of a denial: got %d, want 0", i, c.at, c.reqs[j].Key, r.Remaining)
					}
				}
			}
		})
	}
}

// TestMemorySweepKeepsLockouts checks that a key whose counts have aged
// out is not evicted while it is locked out.
func TestMemorySweepKeepsLockouts(t *testing.T) {
	t.Parallel()
	m := newTestMemory(t, MemoryConfig{Shards: 2})
	p := &Params{Algorithm: "token_bucket", Limit: 1, Window: time.Second, Lock: time.Minute}
	reqs, res := []Request{{Key: "k", Params: p}}, make([]Result, 1)
	for range 2 {
		if _, err := m.Allow(context.Background(), t0, reqs, res); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		at      time.Duration
		evicted int
	}{
		{at: 10 * time.Second, evicted: 0},
		{at: time.Minute - 1, evicted: 0},
		{at: time.Minute, evicted: 1},
	}
	for i, tt := range tests {
		if got := m.Sweep(t0.Add(tt.at)); got != tt.evicted {
			t.Errorf("step %d: Sweep(t0+%v): got %d, want %d", i, tt.at, got, tt.evicted)
		}
	}
}

// TestMemoryForgetsUnusedParams checks that the Params of past rule edits
// do not pile up: after 1,000 limit changes, each used by a key and then
// swept, the store holds no more Params than it did after the first.
func TestMemoryForgetsUnusedParams(t *testing.T) {
	t.Parallel()
	m, err := NewMemory(MemoryConfig{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	interned := func() int {
		n := 0
		for s := range m.shards {
			m.shards[s].mu.Lock()
			n += len(m.rules[s])
			m.shards[s].mu.Unlock()
		}
		return n
	}
	var after1 int
	for i := range 1000 {
		p := Params{Algorithm: "sliding_window", Limit: int64(100 + i), Window: time.Minute, Precision: 10}
		for _, key := range []string{"a|/x", "b|/y", "c|/z"} {
			if _, err := m.Allow(context.Background(), now, []Request{{Key: key, Params: &p}}, make([]Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		m.Forget(func(string) bool { return true }) // what a reload does
		if i == 0 {
			after1 = interned()
		}
	}
	if got := interned(); got > after1 {
		t.Errorf("interned Params after 1,000 edits: %d, after the first: %d", got, after1)
	}
}
