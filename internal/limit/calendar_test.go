package limit

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func calParams(limit int64, c Calendar, zone string) *Params {
	return &Params{Algorithm: "fixed_window", Limit: limit, Window: c.Nominal(), Calendar: c, Zone: zone}
}

// zone loads name or fails t.
func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
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

// TestCalendarSpan checks the windows of the calendar units on their
// awkward days: the daylight-saving changes of Europe/Berlin (a 23-hour
// and a 25-hour day), weeks from Monday, months of 28 to 31 days.
func TestCalendarSpan(t *testing.T) {
	t.Parallel()
	ber, utc := zone(t, "Europe/Berlin"), time.UTC
	h := time.Hour
	day := 24 * h
	tests := []struct {
		name       string
		p          *Params
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		{name: "day before the spring change", p: calParams(1, CalendarDay, "Europe/Berlin"), at: local(ber, 2026, 3, 28, 23, 59, 59),
			start: local(ber, 2026, 3, 28, 0, 0, 0), end: local(ber, 2026, 3, 29, 0, 0, 0), length: day},
		{name: "spring change: 23 hours", p: calParams(1, CalendarDay, "Europe/Berlin"), at: local(ber, 2026, 3, 29, 0, 0, 0),
			start: local(ber, 2026, 3, 29, 0, 0, 0), end: local(ber, 2026, 3, 30, 0, 0, 0), length: 23 * h},
		{name: "spring change, after the skipped hour", p: calParams(1, CalendarDay, "Europe/Berlin"), at: local(ber, 2026, 3, 29, 3, 0, 0),
			start: local(ber, 2026, 3, 29, 0, 0, 0), end: local(ber, 2026, 3, 30, 0, 0, 0), length: 23 * h},
		{name: "autumn change: 25 hours", p: calParams(1, CalendarDay, "Europe/Berlin"), at: local(ber, 2026, 10, 25, 23, 59, 59),
			start: local(ber, 2026, 10, 25, 0, 0, 0), end: local(ber, 2026, 10, 26, 0, 0, 0), length: 25 * h},
		{name: "autumn change, in the repeated hour", p: calParams(1, CalendarDay, "Europe/Berlin"), at: time.Date(2026, 10, 25, 1, 30, 0, 0, utc),
			start: local(ber, 2026, 10, 25, 0, 0, 0), end: local(ber, 2026, 10, 26, 0, 0, 0), length: 25 * h},
		{name: "Berlin midnight is not UTC's", p: calParams(1, CalendarDay, "Europe/Berlin"), at: time.Date(2026, 1, 14, 23, 30, 0, 0, utc),
			start: time.Date(2026, 1, 14, 23, 0, 0, 0, utc), end: time.Date(2026, 1, 15, 23, 0, 0, 0, utc), length: day},
		// Chile skips midnight on 2026-09-06 (00:00 -04 is 01:00 -03), and
		// time.Date puts that midnight at 23:00 -04 the evening before: the
		// last local hour of the 5th is in the window of the 6th.
		{name: "a skipped midnight", p: calParams(1, CalendarDay, "America/Santiago"), at: time.Date(2026, 9, 5, 12, 0, 0, 0, utc),
			start: time.Date(2026, 9, 5, 4, 0, 0, 0, utc), end: time.Date(2026, 9, 6, 3, 0, 0, 0, utc), length: 23 * h},
		{name: "after a skipped midnight, still the day before locally", p: calParams(1, CalendarDay, "America/Santiago"), at: time.Date(2026, 9, 6, 3, 30, 0, 0, utc),
			start: time.Date(2026, 9, 6, 3, 0, 0, 0, utc), end: time.Date(2026, 9, 7, 3, 0, 0, 0, utc), length: day},
		{name: "day in UTC", p: calParams(1, CalendarDay, ""), at: time.Date(2026, 1, 14, 23, 30, 0, 0, utc),
			start: time.Date(2026, 1, 14, 0, 0, 0, 0, utc), end: time.Date(2026, 1, 15, 0, 0, 0, 0, utc), length: day},

		{name: "week: Sunday night belongs to the week from Monday", p: calParams(1, CalendarWeek, "Europe/Berlin"), at: local(ber, 2026, 3, 29, 23, 59, 59),
			start: local(ber, 2026, 3, 23, 0, 0, 0), end: local(ber, 2026, 3, 30, 0, 0, 0), length: 7*day - h},
		{name: "week: Monday 00:00 starts one", p: calParams(1, CalendarWeek, "Europe/Berlin"), at: local(ber, 2026, 3, 30, 0, 0, 0),
			start: local(ber, 2026, 3, 30, 0, 0, 0), end: local(ber, 2026, 4, 6, 0, 0, 0), length: 7 * day},
		{name: "week across a new year", p: calParams(1, CalendarWeek, "UTC"), at: time.Date(2027, 1, 1, 12, 0, 0, 0, utc),
			start: time.Date(2026, 12, 28, 0, 0, 0, 0, utc), end: time.Date(2027, 1, 4, 0, 0, 0, 0, utc), length: 7 * day},

		{name: "month: Jan 31", p: calParams(1, CalendarMonth, "UTC"), at: time.Date(2026, 1, 31, 23, 59, 59, 0, utc),
			start: time.Date(2026, 1, 1, 0, 0, 0, 0, utc), end: time.Date(2026, 2, 1, 0, 0, 0, 0, utc), length: 31 * day},
		{name: "month: February of 28 days", p: calParams(1, CalendarMonth, "UTC"), at: time.Date(2026, 2, 1, 0, 0, 0, 0, utc),
			start: time.Date(2026, 2, 1, 0, 0, 0, 0, utc), end: time.Date(2026, 3, 1, 0, 0, 0, 0, utc), length: 28 * day},
		{name: "month: February of a leap year", p: calParams(1, CalendarMonth, "UTC"), at: time.Date(2028, 2, 28, 23, 59, 59, 0, utc),
			start: time.Date(2028, 2, 1, 0, 0, 0, 0, utc), end: time.Date(2028, 3, 1, 0, 0, 0, 0, utc), length: 29 * day},
		{name: "month: Dec 31", p: calParams(1, CalendarMonth, "UTC"), at: time.Date(2026, 12, 31, 23, 59, 59, 0, utc),
			start: time.Date(2026, 12, 1, 0, 0, 0, 0, utc), end: time.Date(2027, 1, 1, 0, 0, 0, 0, utc), length: 31 * day},
		{name: "month with the spring change", p: calParams(1, CalendarMonth, "Europe/Berlin"), at: local(ber, 2026, 3, 15, 0, 0, 0),
			start: local(ber, 2026, 3, 1, 0, 0, 0), end: local(ber, 2026, 4, 1, 0, 0, 0), length: 31*day - h},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start, end := calendarSpan(tt.at.UnixNano(), tt.p)
			if start != tt.start.UnixNano() || end != tt.end.UnixNano() {
				t.Errorf("span at %v: got [%v, %v), want [%v, %v)", tt.at, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), tt.start.UTC(), tt.end.UTC())
			}
			if got := time.Duration(end - start); got != tt.length {
				t.Errorf("span at %v: got %v long, want %v", tt.at, got, tt.length)
			}
		})
	}
}

// TestCalendarSpanTiles checks, at random instants in zones whose
// daylight-saving changes happen at midnight or skip a whole day, that
// the window holding an instant holds it and that the windows tile the
// time line: the one before ends where it starts, the next starts where
// it ends, each starts at a local midnight or where one was skipped.
func TestCalendarSpanTiles(t *testing.T) {
	t.Parallel()
	zones := []string{"UTC", "Europe/Berlin", "America/Santiago", "America/Sao_Paulo", "Asia/Tehran",
		"America/Havana", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kathmandu", "America/St_Johns"}
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, name := range zones {
		for _, c := range Calendars() {
			p := calParams(1, c, name)
			for range 2000 {
				now := lo + rng.Int64N(hi-lo)
				start, end := calendarSpan(now, p)
				if !(start <= now && now < end) {
					t.Fatalf("%s %s at %v: [%v, %v) does not hold it", c, name, time.Unix(0, now), time.Unix(0, start), time.Unix(0, end))
				}
				if s, _ := calendarSpan(end, p); s != end {
					t.Fatalf("%s %s at %v: the next window starts at %v, not at the end %v", c, name, time.Unix(0, now), time.Unix(0, s), time.Unix(0, end))
				}
				if _, e := calendarSpan(start-1, p); e != start {
					t.Fatalf("%s %s at %v: the previous window ends at %v, not at the start %v", c, name, time.Unix(0, now), time.Unix(0, e), time.Unix(0, start))
				}
				if l := time.Duration(end - start); l < 22*time.Hour || l > c.Nominal()+2*24*time.Hour {
					t.Fatalf("%s %s at %v: a window of %v", c, name, time.Unix(0, now), l)
				}
			}
		}
	}
}

// TestCalendarIdentity checks that a reload keeps a calendar counter only
// when its unit and zone are unchanged.
func TestCalendarIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 29, 10, 0, 0, 0, time.UTC)
	base := calParams(1, CalendarDay, "Europe/Berlin")
	higher := calParams(2, CalendarDay, "Europe/Berlin")
	tests := []struct {
		name string
		next *Params
		want bool // admitted after one request was counted under base
	}{
		{name: "same", next: base, want: false},
		{name: "a new limit keeps the count", next: higher, want: true},
		{name: "a new zone starts afresh", next: calParams(1, CalendarDay, "America/New_York"), want: true},
		{name: "a new calendar unit starts afresh", next: calParams(1, CalendarWeek, "Europe/Berlin"), want: true},
		{name: "a plain day starts afresh", next: fwParams(1, 24*time.Hour), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := NewMemory(MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			res := make([]Result, 1)
			if ok, err := m.Allow(ctx, now, []Request{{Key: "a|/", Params: base}}, res); !ok || err != nil {
				t.Fatalf("first request: got %v %v, want admitted", ok, err)
			}
			ok, err := m.Allow(ctx, now, []Request{{Key: "a|/", Params: tt.next}}, res)
			if err != nil {
				t.Fatal(err)
			}
			if tt.next == higher {
				// The count of one stayed: one left of two.
				if !ok || res[0].Remaining != 0 {
					t.Errorf("got %v with %d remaining, want admitted with 0 (the count kept)", ok, res[0].Remaining)
				}
				return
			}
			if ok != tt.want {
				t.Errorf("second request: got admitted %v, want %v", ok, tt.want)
			}
		})
	}
}

func TestCalendarValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       Params
		want    string // a part of the error, "" for valid
		setting string
	}{
		{name: "calendar-day", p: *calParams(5, CalendarDay, "Europe/Berlin")},
		{name: "UTC by default", p: *calParams(5, CalendarMonth, "")},
		{name: "other algorithm", p: Params{Algorithm: "token_bucket", Limit: 5, Window: 24 * time.Hour, Calendar: CalendarDay},
			want: "unit calendar-day counts only with algorithm fixed_window, not token_bucket", setting: "algorithm"},
		{name: "unknown unit", p: Params{Algorithm: "fixed_window", Limit: 5, Window: time.Hour, Calendar: "calendar-hour"},
			want: `unknown calendar unit "calendar-hour" (known: calendar-day, calendar-week, calendar-month)`, setting: "unit"},
		{name: "unknown zone", p: *calParams(5, CalendarDay, "Europe/Atlantis"), want: `unknown time zone "Europe/Atlantis"`, setting: "timezone"},
		{name: "Local", p: *calParams(5, CalendarDay, "Local"), want: `unknown time zone "Local": "Local" is the host's own zone`, setting: "timezone"},
		{name: "zone without a calendar unit", p: Params{Algorithm: "fixed_window", Limit: 5, Window: time.Hour, Zone: "UTC"},
			want: "timezone UTC applies only to the calendar units", setting: "timezone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: got %v, want nil", err)
				}
				return
			}
			var se *SettingError
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &se) || se.Setting != tt.setting {
				t.Fatalf("Validate: got %v, want an error about %s containing %q", err, tt.setting, tt.want)
			}
		})
	}
}
