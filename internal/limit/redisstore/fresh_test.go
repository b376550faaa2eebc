package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisNewKeysAsAnyOther checks the decision's short way for the
// usual call on a new key (freshFor in redis.lua: made once per settings
// and instant, then reused by every new key of the batch): for every
// algorithm, with random settings, a batch of new keys gets the answers,
// the fields and the expiry that one such key gets the long way (the
// same request spelled as a call with its cost, mode and lease, which
// never takes the short way), and a second request on each is decided
// alike.
func TestRedisNewKeysAsAnyOther(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedFunctions(t, srv)
	ctx := context.Background()
	cl := srv.Client()
	call := func(prefix string, p *limit.Params, long bool) *batchCall {
		reqs := []limit.Request{{Key: prefix, Params: p}}
		keys, tag, _, err := redisKeys(reqs)
		if err != nil {
			t.Fatal(err)
		}
		args := red.scriptArgs(time.Time{}, reqs, tag, nil)
		if long {
			if args[2] != "" {
				t.Fatalf("the usual call's argument is %q, want \"\"", args[2])
			}
			args[2] = "1 - 0 0 0 0"
		}
		return &batchCall{keys: keys, args: args}
	}
	for _, alg := range limit.Algorithms() {
		if a, _ := limit.Lookup(alg); a == nil {
			continue
		} else if _, ok := a.(limit.RedisAlgorithm); !ok {
			continue
		}
		for seed := range 6 {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			p := redisParams(rng, alg)
			name := fmt.Sprintf("%s/%d", alg, seed)
			clock.us.Add(rng.Int64N(5_000_000))
			// Four new keys in one batch, and the same request the long way.
			var batch []*batchCall
			for i := range 4 {
				batch = append(batch, call(fmt.Sprintf("%s|new|%d", name, i), p, false))
			}
			red.runAsOne(ctx, batch)
			long := call(name+"|long", p, true)
			long.v, long.err = red.run(ctx, long.keys, long.args)
			if long.err != nil {
				t.Fatalf("%s: the long way: %v", name, long.err)
			}
			want, err := cl.HGetAll(ctx, long.keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			wantTTL := cl.PTTL(ctx, long.keys[0]).Val()
			for i, c := range batch {
				if c.err != nil || !slices.Equal(c.v, long.v) {
					t.Errorf("%s, new key %d: got %v %v, want %v (%v)", name, i, c.v, c.err, long.v, p)
				}
				got, err := cl.HGetAll(ctx, c.keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s, new key %d: fields %v, want %v", name, i, got, want)
				}
				// Both expire at one instant; the real clock moved a little
				// between the two reads.
				if ttl := cl.PTTL(ctx, c.keys[0]).Val(); (ttl > 0) != (wantTTL > 0) || (ttl-wantTTL).Abs() > time.Second {
					t.Errorf("%s, new key %d: time to live %v, want %v", name, i, ttl, wantTTL)
				}
			}
			// A second request on each, a little later.
			clock.us.Add(rng.Int64N(200_000))
			second := call(name+"|long", p, false)
			second.v, second.err = red.run(ctx, second.keys, second.args)
			for i := range batch {
				c := call(fmt.Sprintf("%s|new|%d", name, i), p, false)
				c.v, c.err = red.run(ctx, c.keys, c.args)
				if c.err != nil || second.err != nil || !slices.Equal(c.v, second.v) {
					t.Errorf("%s, new key %d, second request: got %v %v, want %v %v", name, i, c.v, c.err, second.v, second.err)
				}
			}
		}
	}
}
