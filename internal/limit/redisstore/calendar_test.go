package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/limit/limittest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// TestRedisCalendarSteps runs limittest.CalendarCases through the Redis store,
// deciding on Redis's (fixed) clock with the gateway's clock beside it,
// as the proxy does.
func TestRedisCalendarSteps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for i, tt := range limittest.CalendarCases(t) {
		t.Run(tt.Name, func(t *testing.T) {
			t.Parallel()
			red, clock := newFixedRedis(t, srv)
			key := "cal|/" + string(rune('a'+i))
			res := make([]limit.Result, 1)
			for j, s := range tt.Steps {
				now := limittest.T0.Add(s.At)
				clock.us.Store(now.UnixMicro())
				if _, err := red.Allow(context.Background(), now, []limit.Request{{Key: key, Params: tt.P}}, res); err != nil {
					t.Fatalf("step %d (%v): %v", j, now, err)
				}
				want := limit.Result{Allowed: s.Allow, Limit: tt.P.Limit, Remaining: s.Remaining, RetryAfter: s.RetryAfter, Reset: s.Reset}
				if res[0] != want {
					t.Errorf("step %d (%v): got %+v, want %+v", j, now, res[0], want)
				}
			}
		})
	}
}

// TestRedisCalendarClocks checks that the script places Redis's clock in
// its calendar window whatever the gateways' clocks say, within a window:
// two gateways an hour either side of Redis across midnight count in the
// same counter, and a gateway a day off is refused.
func TestRedisCalendarClocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ber := limittest.Zone(t, "Europe/Berlin")
	p := calParams(2, limit.CalendarDay, "Europe/Berlin")
	red, clock := newFixedRedis(t, srv)
	ctx := context.Background()
	res := make([]limit.Result, 1)
	req := []limit.Request{{Key: "clocks|/", Params: p}}
	steps := []struct {
		redis, gateway time.Time
		want           limit.Result
	}{
		// Redis at 23:59:59, the gateway an hour ahead, past midnight:
		// the count is in Redis's day.
		{redis: local(ber, 2026, 3, 28, 23, 59, 59), gateway: local(ber, 2026, 3, 29, 0, 59, 59),
			want: limit.Result{Allowed: true, Limit: 2, Remaining: 1, Reset: time.Second}},
		// Another gateway, an hour behind.
		{redis: local(ber, 2026, 3, 28, 23, 59, 59), gateway: local(ber, 2026, 3, 28, 22, 59, 59),
			want: limit.Result{Allowed: true, Limit: 2, Remaining: 0, Reset: time.Second}},
		{redis: local(ber, 2026, 3, 28, 23, 59, 59), gateway: local(ber, 2026, 3, 29, 0, 59, 59),
			want: limit.Result{Limit: 2, Reset: time.Second, RetryAfter: time.Second}},
		// Redis past midnight, the gateway still before it: a new day.
		{redis: local(ber, 2026, 3, 29, 0, 0, 0), gateway: local(ber, 2026, 3, 28, 23, 0, 0),
			want: limit.Result{Allowed: true, Limit: 2, Remaining: 1, Reset: 23 * time.Hour}},
	}
	for i, s := range steps {
		clock.us.Store(s.redis.UnixMicro())
		if _, err := red.Allow(ctx, s.gateway, req, res); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res[0] != s.want {
			t.Errorf("step %d (Redis at %v, gateway at %v): got %+v, want %+v", i, s.redis, s.gateway, res[0], s.want)
		}
	}
	clock.us.Store(local(ber, 2026, 3, 29, 12, 0, 0).UnixMicro())
	_, err := red.Allow(ctx, local(ber, 2026, 3, 31, 12, 0, 0), req, res)
	if err == nil || !strings.Contains(err.Error(), "more than a calendar window away") {
		t.Errorf("a gateway two days ahead: got %v, want the script's clock error", err)
	}
}

// TestRedisCalendarExpiry checks that a calendar counter's key expires at
// its window's end (plus the store's second, and the hour a fixed test
// clock adds).
func TestRedisCalendarExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red, clock := newFixedRedis(t, srv)
	ber := limittest.Zone(t, "Europe/Berlin")
	now := local(ber, 2026, 3, 29, 12, 0, 0) // 12 hours before the end of the day
	clock.us.Store(now.UnixMicro())
	req := limit.Request{Key: "exp|/cal", Params: calParams(5, limit.CalendarDay, "Europe/Berlin")}
	if _, err := red.Allow(context.Background(), now, []limit.Request{req}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	ttl, err := srv.Client().PTTL(context.Background(), redisKey(redisTag(&req), req.Key)).Result()
	want := 12*time.Hour + time.Second + time.Hour
	// PTTL counts down on Redis's real clock while the test runs.
	if err != nil || ttl > want || ttl < want-time.Minute {
		t.Errorf("PTTL: got %v %v, want %v", ttl, err, want)
	}
}

// calParams returns fixed_window Params of lim per calendar unit c in zone.
func calParams(lim int64, c limit.Calendar, zone string) *limit.Params {
	return &limit.Params{Algorithm: "fixed_window", Limit: lim, Window: c.Nominal(), Calendar: c, Zone: zone}
}

// local returns the instant y-m-d h:mi:s in loc.
func local(loc *time.Location, y int, m time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, m, d, h, mi, s, 0, loc)
}
