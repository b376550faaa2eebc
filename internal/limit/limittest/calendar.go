package limittest

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Step is one request of a step table, of one unit at T0+At, and the
// Result it must get.
type Step struct {
	At         time.Duration
	Allow      bool
	Remaining  int64
	RetryAfter time.Duration
	Reset      time.Duration
}

// CalendarCase is a step table of a calendar unit.
type CalendarCase struct {
	Name  string
	P     *limit.Params
	Steps []Step
}

// calParams returns fixed_window Params of lim per calendar unit c in zone.
func calParams(lim int64, c limit.Calendar, zone string) *limit.Params {
	return &limit.Params{Algorithm: "fixed_window", Limit: lim, Window: c.Nominal(), Calendar: c, Zone: zone}
}

// Zone loads name or fails t.
func Zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := limit.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// local returns the instant y-m-d h:mi:s in loc; with a repeated hour, the
// first of the two.
func local(loc *time.Location, y int, m time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, m, d, h, mi, s, 0, loc)
}

// CalendarCases are step tables of calendar units at instants given in
// full (At is relative to T0).
func CalendarCases(t testing.TB) []CalendarCase {
	ber := Zone(t, "Europe/Berlin")
	utc := time.UTC
	at := func(tm time.Time) time.Duration { return tm.Sub(T0) }
	h, s := time.Hour, time.Second
	day := 24 * h
	return []CalendarCase{
		{
			Name: "full at 23:59:59 local, free at 00:00:00 on a 23-hour day",
			P:    calParams(2, limit.CalendarDay, "Europe/Berlin"),
			Steps: []Step{
				{At: at(local(ber, 2026, 3, 28, 10, 0, 0)), Allow: true, Remaining: 1, Reset: 14 * h},
				{At: at(local(ber, 2026, 3, 28, 23, 59, 59)), Allow: true, Remaining: 0, Reset: s},
				{At: at(local(ber, 2026, 3, 28, 23, 59, 59)), RetryAfter: s, Reset: s},
				{At: at(local(ber, 2026, 3, 29, 0, 0, 0)), Allow: true, Remaining: 1, Reset: 23 * h},
				{At: at(local(ber, 2026, 3, 29, 12, 0, 0)), Allow: true, Remaining: 0, Reset: 12 * h},
				{At: at(local(ber, 2026, 3, 29, 23, 59, 59)), RetryAfter: s, Reset: s},
				{At: at(local(ber, 2026, 3, 30, 0, 0, 0)), Allow: true, Remaining: 1, Reset: day},
			},
		},
		{
			Name: "a 25-hour day",
			P:    calParams(1, limit.CalendarDay, "Europe/Berlin"),
			Steps: []Step{
				{At: at(local(ber, 2026, 10, 25, 0, 0, 0)), Allow: true, Remaining: 0, Reset: 25 * h},
				// 01:30 UTC is 02:30 local, the second time.
				{At: at(time.Date(2026, 10, 25, 1, 30, 0, 0, utc)), RetryAfter: 21*h + 30*time.Minute, Reset: 21*h + 30*time.Minute},
				{At: at(local(ber, 2026, 10, 25, 23, 59, 59)), RetryAfter: s, Reset: s},
				{At: at(local(ber, 2026, 10, 26, 0, 0, 0)), Allow: true, Remaining: 0, Reset: day},
			},
		},
		{
			Name: "a week from Monday",
			P:    calParams(1, limit.CalendarWeek, "Europe/Berlin"),
			Steps: []Step{
				{At: at(local(ber, 2026, 3, 23, 0, 0, 0)), Allow: true, Remaining: 0, Reset: 7*day - h},
				{At: at(local(ber, 2026, 3, 29, 23, 59, 59)), RetryAfter: s, Reset: s},
				{At: at(local(ber, 2026, 3, 30, 0, 0, 0)), Allow: true, Remaining: 0, Reset: 7 * day},
			},
		},
		{
			Name: "months: Jan 31 to Feb 1 to Mar 1",
			P:    calParams(1, limit.CalendarMonth, "UTC"),
			Steps: []Step{
				{At: at(time.Date(2026, 1, 31, 23, 59, 59, 0, utc)), Allow: true, Remaining: 0, Reset: s},
				{At: at(time.Date(2026, 2, 1, 0, 0, 0, 0, utc)), Allow: true, Remaining: 0, Reset: 28 * day},
				{At: at(time.Date(2026, 2, 28, 23, 59, 59, 0, utc)), RetryAfter: s, Reset: s},
				{At: at(time.Date(2026, 3, 1, 0, 0, 0, 0, utc)), Allow: true, Remaining: 0, Reset: 31 * day},
			},
		},
		{
			Name: "months: a leap February",
			P:    calParams(1, limit.CalendarMonth, "UTC"),
			Steps: []Step{
				{At: at(time.Date(2028, 2, 28, 23, 59, 59, 0, utc)), Allow: true, Remaining: 0, Reset: day + s},
				{At: at(time.Date(2028, 2, 29, 0, 0, 0, 0, utc)), RetryAfter: day, Reset: day},
				{At: at(time.Date(2028, 2, 29, 23, 59, 59, 0, utc)), RetryAfter: s, Reset: s},
				{At: at(time.Date(2028, 3, 1, 0, 0, 0, 0, utc)), Allow: true, Remaining: 0, Reset: 31 * day},
			},
		},
		{
			Name: "months: Dec 31 to Jan 1",
			P:    calParams(1, limit.CalendarMonth, "Europe/Berlin"),
			Steps: []Step{
				{At: at(local(ber, 2026, 12, 31, 23, 59, 59)), Allow: true, Remaining: 0, Reset: s},
				{At: at(local(ber, 2026, 12, 31, 23, 59, 59)), RetryAfter: s, Reset: s},
				{At: at(local(ber, 2027, 1, 1, 0, 0, 0)), Allow: true, Remaining: 0, Reset: 31 * day},
			},
		},
		{
			Name: "a clock that steps back counts in the newest window",
			P:    calParams(1, limit.CalendarDay, "UTC"),
			Steps: []Step{
				{At: at(time.Date(2026, 2, 1, 0, 0, 0, 0, utc)), Allow: true, Remaining: 0, Reset: day},
				{At: at(time.Date(2026, 1, 31, 23, 0, 0, 0, utc)), RetryAfter: 25 * h, Reset: 25 * h},
			},
		},
		{
			Name:  "limit 0 blocks",
			P:     calParams(0, limit.CalendarDay, "Europe/Berlin"),
			Steps: []Step{{At: at(local(ber, 2026, 3, 29, 12, 0, 0)), RetryAfter: day, Reset: day}},
		},
		{
			Name:  "unlimited",
			P:     calParams(limit.Unlimited, limit.CalendarMonth, "Europe/Berlin"),
			Steps: []Step{{At: 0, Allow: true, Remaining: -1}, {At: 0, Allow: true, Remaining: -1}},
		},
	}
}
