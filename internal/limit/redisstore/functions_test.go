package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisFunctionsDenied checks that a store whose Redis user may not
// load functions (an ACL without FUNCTION), or whose Redis does not know
// FUNCTION (as before Redis 7; here renamed away), decides with EVALSHA
// instead, exactly as with them.
func TestRedisFunctionsDenied(t *testing.T) {
	t.Parallel()
	for _, acl := range []bool{true, false} {
		name := "acl"
		if !acl {
			name = "unknown command"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRedisFunctionsDenied(t, acl)
		})
	}
}

func testRedisFunctionsDenied(t *testing.T, acl bool) {
	ctx := context.Background()
	var srv *redistest.Server
	url := ""
	if acl {
		srv = redistest.Start(t)
		url = deniedURL(t, srv, "-function")
	} else {
		srv = redistest.Start(t, "--rename-command", "FUNCTION", "")
		url = srv.URL()
	}
	red := newTestRedis(t, Config{URL: url, Timeout: time.Second})
	redistest.Ready(t, red)
	if red.fn.on.Load() || !red.fn.denied.Load() {
		t.Fatalf("library: on %v, denied %v; want off and denied", red.fn.on.Load(), red.fn.denied.Load())
	}
	p := &limit.Params{Algorithm: "fixed_window", Limit: 2, Window: quietWindow(time.Hour)}
	res := make([]limit.Result, 1)
	for i, want := range []bool{true, true, false} {
		got, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: "denied|/", Params: p}}, res)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got != want {
			t.Errorf("call %d: allowed: got %v, want %v", i, got, want)
		}
	}
	stats := srv.Info("commandstats")
	if calls := stats["cmdstat_evalsha"]; !strings.Contains(calls, "calls=3,") {
		t.Errorf("EVALSHA stats: got %q, want 3 calls", calls)
	}
	if calls := stats["cmdstat_fcall"]; calls != "" {
		t.Errorf("FCALL stats: got %q, want none", calls)
	}
}

// TestRedisFunctionsLoaded checks that Ready loads the library, named by
// the script's hash, and that the store calls it.
func TestRedisFunctionsLoaded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	red := newTestRedis(t, Config{URL: srv.URL(), Timeout: time.Second})
	redistest.Ready(t, red)
	libs, err := srv.Client().FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: red.fn.name}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 1 || len(libs[0].Functions) != 1 || libs[0].Functions[0].Name != red.fn.name {
		t.Fatalf("FUNCTION LIST %s: got %+v, want the library with its one function", red.fn.name, libs)
	}
	p := &limit.Params{Algorithm: "sliding_window", Limit: 2, Window: time.Hour, Precision: 10}
	res := make([]limit.Result, 1)
	if ok, err := red.Allow(ctx, time.Time{}, []limit.Request{{Key: "loaded|/", Params: p}}, res); err != nil || !ok {
		t.Fatalf("Allow: %v %v", ok, err)
	}
	// Ready's check and the decision.
	if calls := srv.Info("commandstats")["cmdstat_fcall"]; !strings.Contains(calls, "calls=2,") {
		t.Errorf("FCALL stats: got %q, want 2 calls", calls)
	}
}

// deniedURL returns the URL of srv for a Redis user that may run every
// command but those denied ("-function", ...), by ACL.
func deniedURL(t *testing.T, srv *redistest.Server, denied ...string) string {
	t.Helper()
	args := []any{"ACL", "SETUSER", "gw", "on", ">secret", "~*", "&*", "+@all"}
	for _, d := range denied {
		args = append(args, d)
	}
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(srv.URL(), "redis://", "redis://gw:secret@", 1)
}
