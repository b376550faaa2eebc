package limit

import (
	"errors"
	"strings"
	"sync"
	"time"
)

// Calendar is a calendar unit (docs/algorithms.md, "Calendar units"): a fixed
// window that starts at local midnight, on Monday at 00:00 or on the first
// of the month at 00:00 in a time zone (Params.Zone), rather than at a
// multiple of Params.Window since the Unix epoch. A day is 23 or 25 hours
// long when daylight-saving time starts or ends, a month 28 to 31 days.
// The zero value is no calendar unit.
type Calendar string

// The calendar units, as the rule file writes them.
const (
	CalendarDay   Calendar = "calendar-day"
	CalendarWeek  Calendar = "calendar-week"
	CalendarMonth Calendar = "calendar-month"
)

// CalendarAlgorithm is the algorithm that counts calendar units, and the
// one a rule file's calendar unit implies when it names no algorithm.
const CalendarAlgorithm = "fixed_window"

// Calendars returns the calendar units.
func Calendars() []Calendar { return []Calendar{CalendarDay, CalendarWeek, CalendarMonth} }

// Nominal returns the usual length of c's window (24h, 7×24h, 30×24h),
// the Params.Window of a calendar unit: what the RateLimit-Policy header's
// w reports. The windows themselves are as long as the calendar says.
func (c Calendar) Nominal() time.Duration {
	switch c {
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 30 * 24 * time.Hour
	}
	return 0
}

// Unit returns p's unit as the rule file writes it: the calendar unit, or
// Window as a Go duration ("1m0s").
func (p *Params) Unit() string {
	if p.Calendar != "" {
		return string(p.Calendar)
	}
	return p.Window.String()
}

// zones caches the locations LoadZone loaded, by name: loading one reads
// a file, and a decision needs its calendar unit's.
var zones sync.Map // string → *time.Location

// LoadZone returns the time zone named by an IANA name ("Europe/Berlin";
// "" is UTC), from the system's database or, failing that, from the copy
// that a binary importing time/tzdata embeds. "Local" is refused: it is
// whatever the host is set to, so gateways on different hosts would
// disagree on where a window starts.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "Local" {
		return nil, errors.New(`"Local" is the host's own zone, which gateways on different hosts may not share; name the zone, like Europe/Berlin`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// validateCalendar checks the calendar settings of p: a known calendar
// unit with an algorithm that reads it, and a zone only with one.
func (p *Params) validateCalendar() error {
	switch {
	case p.Calendar == "" && p.Zone != "":
		return settingErrorf("timezone", "timezone %s applies only to the calendar units (%s)", p.Zone, calendarList())
	case p.Calendar == "":
		return nil
	case p.Calendar.Nominal() == 0:
		return settingErrorf("unit", "unknown calendar unit %q (known: %s)", p.Calendar, calendarList())
	case p.Algorithm != CalendarAlgorithm:
		return settingErrorf("algorithm", "unit %s counts only with algorithm %s, not %s", p.Calendar, CalendarAlgorithm, p.Algorithm)
	}
	if _, err := LoadZone(p.Zone); err != nil {
		return settingErrorf("timezone", "unknown time zone %q: %v", p.Zone, err)
	}
	return nil
}

func calendarList() string {
	var s []string
	for _, c := range Calendars() {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}

// calendarSpan returns the calendar window of p that holds now: its start
// and its end (the next one's start), in nanoseconds since the Unix epoch.
//
// Each start is local midnight of a date (time.Date, which resolves a
// midnight that daylight-saving time skips or repeats), so the windows
// tile the time line; the loops step to the neighbouring window in the
// zones where a skipped midnight resolves to the evening before.
func calendarSpan(now int64, p *Params) (start, end int64) {
	loc, err := LoadZone(p.Zone)
	if err != nil {
		loc = time.UTC // Params are validated before use
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	switch p.Calendar {
	case CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	case CalendarMonth:
		d = 1
	}
	at := func(k int) int64 { return calendarStart(p.Calendar, y, m, d, k, loc) }
	k := 0
	for at(k) > now {
		k--
	}
	for at(k+1) <= now {
		k++
	}
	return at(k), at(k + 1)
}

// calendarStart returns the start of the k-th window of unit c after the
// one that starts at local midnight of y-m-d.
func calendarStart(c Calendar, y int, m time.Month, d, k int, loc *time.Location) int64 {
	switch c {
	case CalendarWeek:
		d += 7 * k
	case CalendarMonth:
		m += time.Month(k)
	default:
		d += k
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc).UnixNano()
}

// CalendarSpan returns the window of p's calendar unit (Params.Calendar)
// that holds now: its start and its end (the next one's start), all in
// nanoseconds since the Unix epoch. p must have a Calendar.
func (p *Params) CalendarSpan(now int64) (start, end int64) {
	return calendarSpan(now, p)
}
