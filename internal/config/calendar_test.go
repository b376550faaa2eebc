package config

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestCalendarUnits checks the Params of calendar units: the zone from the
// rule, the app or defaults (UTC without one), fixed_window implied when
// no algorithm is named, and defaults' precision left to sliding_window.
func TestCalendarUnits(t *testing.T) {
	t.Parallel()
	day, week, month := limit.CalendarDay, limit.CalendarWeek, limit.CalendarMonth
	cal := func(n int64, c limit.Calendar, zone string) limit.Params {
		return limit.Params{Algorithm: "fixed_window", Limit: n, Window: c.Nominal(), Calendar: c, Zone: zone}
	}
	r := mustParse(t, "rules.yaml", src(`
defaults:
  algorithm: sliding_window
  timezone: Europe/Berlin
  precision: 20
configs:
  - appId: a
    limit: 100000
    unit: calendar-month
    timezone: America/New_York
    limits:
      - {api: /day, limit: 1000, unit: calendar-day}
      - {api: /week, limit: 5000, unit: calendar-week, timezone: Asia/Tokyo}
      - {api: /utc, limit: 5, unit: calendar-day, timezone: UTC, algorithm: fixed_window, lockSeconds: 60}
      - {api: /plain, limit: 5, unit: 60}
  - appId: b
    limits:
      - {api: /, limit: 7, unit: calendar-month}
`))
	want := map[string]limit.Params{
		"a total":  cal(100000, month, "America/New_York"),
		"a /day":   cal(1000, day, "Europe/Berlin"),
		"a /week":  cal(5000, week, "Asia/Tokyo"),
		"a /utc":   {Algorithm: "fixed_window", Limit: 5, Window: 24 * time.Hour, Calendar: day, Zone: "UTC", Lock: time.Minute},
		"a /plain": {Algorithm: "sliding_window", Limit: 5, Window: time.Minute, Precision: 20},
		"b /":      cal(7, month, "Europe/Berlin"),
	}
	got := map[string]limit.Params{}
	for _, a := range r.Apps {
		if a.Total != nil {
			got[a.ID+" total"] = *a.Total
		}
		for _, l := range a.Limits {
			got[a.ID+" "+l.API] = l.Params
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %+v, want %+v", k, got[k], w)
		}
	}

	// Without a timezone anywhere: UTC.
	r = mustParse(t, "rules.json", []byte(`{"configs": [{"appId": "a", "limits": [{"api": "/", "limit": 1, "unit": "calendar-week"}]}]}`))
	if g, w := r.Apps[0].Limits[0].Params, cal(1, week, "UTC"); g != w {
		t.Errorf("no timezone: got %+v, want %+v", g, w)
	}
	r = mustParse(t, "rules.xml", []byte(`<rules><config appId="a"><limit api="/" limit="1" unit="calendar-day" timezone="Europe/Berlin"/></config></rules>`))
	if g, w := r.Apps[0].Limits[0].Params, cal(1, day, "Europe/Berlin"); g != w {
		t.Errorf("xml: got %+v, want %+v", g, w)
	}
}

// TestCalendarErrors checks the calendar settings' problems, each at the
// line of the setting, in YAML, JSON and XML.
func TestCalendarErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		data string
		want []wantErr
	}{
		{name: "unknown zone", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
        unit: calendar-day
        timezone: Europe/Atlantis
`, want: []wantErr{{7, `timezone "Europe/Atlantis" is not a known time zone`}}},
		{name: "Local", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - {api: /, limit: 1, unit: calendar-day, timezone: Local}
`, want: []wantErr{{4, `timezone "Local" is not a known time zone ("Local" is the host's own zone`}}},
		{name: "empty zone", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - {api: /, limit: 1, unit: calendar-day, timezone: ""}
`, want: []wantErr{{4, `timezone is empty`}}},
		{name: "zone without a calendar unit", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
        unit: 60
        timezone: Europe/Berlin
`, want: []wantErr{{7, "timezone applies only to the calendar units (unit: calendar-day, calendar-week or calendar-month), and this unit is 1m0s"}}},
		{name: "zone without a calendar unit on a total", file: "r.yaml", data: `
configs:
  - appId: a
    limit: 5
    timezone: Europe/Berlin
`, want: []wantErr{{4, "the app's total limit: timezone applies only to the calendar units"}}},
		{name: "zone on an app without a total", file: "r.yaml", data: `
configs:
  - appId: a
    timezone: Europe/Berlin
    limits:
      - {api: /, limit: 1, unit: calendar-day}
`, want: []wantErr{{3, "timezone on an app section applies to the app's total limit, but the section has no limit"}}},
		{name: "zone in defaults beside a unit in seconds", file: "r.yaml", data: `
defaults:
  unit: 60
  timezone: Europe/Berlin
configs:
  - appId: a
    limits:
      - {api: /, limit: 1}
`, want: []wantErr{{3, "timezone in defaults applies only to the calendar units, and the unit in defaults is 1m0s"}}},
		{name: "unknown calendar unit", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - {api: /, limit: 1, unit: calendar-year}
`, want: []wantErr{{4, `unit "calendar-year" is not a calendar unit; write calendar-day, calendar-week or calendar-month`}}},
		{name: "calendar unit with another algorithm", file: "r.yaml", data: `
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
        algorithm: token_bucket
        unit: calendar-day
`, want: []wantErr{{6, "unit calendar-day counts only with algorithm fixed_window, not token_bucket; set algorithm: fixed_window beside it"}}},
		{name: "calendar unit in defaults, another algorithm on the rule", file: "r.yaml", data: `
defaults:
  unit: calendar-day
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
        algorithm: sliding_window
`, want: []wantErr{{8, "unit calendar-day counts only with algorithm fixed_window, not sliding_window"}}},
		{name: "algorithm and calendar unit in defaults", file: "r.yaml", data: `
defaults:
  algorithm: leaky_bucket
  unit: calendar-week
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
      - api: /x
        limit: 1
`, want: []wantErr{{3, "unit calendar-week in defaults counts only with algorithm fixed_window, not leaky_bucket (defaults' algorithm)"}}},

		{name: "json", file: "r.json", data: `{"configs": [{"appId": "a", "limits": [
  {"api": "/a", "limit": 1, "unit": "calendar-day",
   "timezone": "Mars/Olympus"},
  {"api": "/b", "limit": 1, "unit": 60, "timezone": "UTC"},
  {"api": "/c", "limit": 1, "unit": "calendar-fortnight"},
  {"api": "/d", "limit": 1, "unit": "calendar-month",
   "algorithm": "sliding_log"}]}]}`, want: []wantErr{
			{3, `timezone "Mars/Olympus" is not a known time zone`},
			{4, "timezone applies only to the calendar units"},
			{5, `unit "calendar-fortnight" is not a calendar unit`},
			{7, "unit calendar-month counts only with algorithm fixed_window, not sliding_log"},
		}},
		{name: "xml", file: "r.xml", data: `<rules>
  <config appId="a">
    <limit api="/a" limit="1" unit="calendar-day"
      timezone="Mars/Olympus"/>
    <limit api="/b" limit="1" unit="60" timezone="UTC"/>
    <limit api="/c" limit="1" unit="calendar-fortnight"/>
    <limit api="/d" limit="1" unit="calendar-month"
      algorithm="sliding_log"/>
  </config>
</rules>`, want: []wantErr{
			{4, `timezone "Mars/Olympus" is not a known time zone`},
			{5, "timezone applies only to the calendar units"},
			{6, `unit "calendar-fortnight" is not a calendar unit`},
			{8, "unit calendar-month counts only with algorithm fixed_window, not sliding_log"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.file, src(tt.data))
			checkErrors(t, err, tt.want)
		})
	}
}
