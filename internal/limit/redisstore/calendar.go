package redisstore

import (
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// calendarArg returns the script argument of a calendar limit of the Redis
// store (redis.lua): the counter's shape, then the starts of the windows
// before, at and after the gateway's now, and the end of the last, in
// microseconds, separated by spaces. The script places Redis's clock among
// them, so that every gateway counts in the window that Redis's clock is
// in, provided their clocks are less than a window apart. It returns ""
// for a limit without a calendar unit.
func calendarArg(p *limit.Params, now time.Time) string {
	if p.Calendar == "" {
		return ""
	}
	ns := now.UnixNano()
	start, end := p.CalendarSpan(ns)
	prev, _ := p.CalendarSpan(start - 1)
	_, next := p.CalendarSpan(end)
	zone := p.Zone
	if zone == "" {
		zone = "UTC"
	}
	b := make([]byte, 0, 80)
	b = append(b, p.Calendar...)
	b = append(b, '@')
	b = append(b, zone...)
	for _, t := range [...]int64{prev, start, end, next} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, t/int64(time.Microsecond), 10)
	}
	return string(b)
}
