package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// The calendar units (docs/algorithms.md, "Calendar units"): unit: calendar-day,
// calendar-week or calendar-month, in the zone timezone names.

// unitOrCalendar returns the value of a unit field: a calendar unit, with
// its nominal length as the duration, or what unit reads.
func (p *parser) unitOrCalendar(f field) (time.Duration, limit.Calendar, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		v := strings.TrimSpace(n.Value)
		for _, c := range limit.Calendars() {
			if v == string(c) {
				return c.Nominal(), c, true
			}
		}
		if strings.HasPrefix(strings.ToLower(v), "calendar") {
			p.errorf(f.line, "unit %q is not a calendar unit; write calendar-day, calendar-week or calendar-month", n.Value)
			return 0, "", false
		}
	}
	d, ok := p.unit(f)
	return d, "", ok
}

// timezone returns the value of a timezone field: an IANA time zone name
// that the gateway knows.
func (p *parser) timezone(f field) (string, bool) {
	name, ok := p.str(f)
	if !ok {
		return "", false
	}
	if strings.TrimSpace(name) == "" {
		p.errorf(f.line, "timezone is empty; name an IANA time zone like Europe/Berlin or America/New_York, or remove timezone for UTC")
		return "", false
	}
	if _, err := limit.LoadZone(name); err != nil {
		p.errorf(f.line, "timezone %q is not a known time zone (%v); name an IANA time zone like Europe/Berlin or America/New_York", name, err)
		return "", false
	}
	return name, true
}

// checkCalendar reports the calendar settings of a limit with settings s
// that cannot work: a timezone written beside a unit that is not a
// calendar unit, or a calendar unit with an algorithm other than
// fixed_window, at the line of the setting the section itself wrote.
func (p *parser) checkCalendar(params *limit.Params, s *settings, prefix string) bool {
	switch {
	case params.Calendar == "" && s.zoneWritten:
		p.errorf(s.zoneLine, "%stimezone applies only to the calendar units (unit: calendar-day, calendar-week or calendar-month), and this unit is %s; set a calendar unit or remove timezone", prefix, params.Window)
		return false
	case params.Calendar != "" && params.Algorithm != limit.CalendarAlgorithm:
		line := s.unitLine
		if s.algorithmWritten {
			line = s.algorithmLine
		}
		p.errorf(line, "%sunit %s counts only with algorithm %s, not %s; set algorithm: %s beside it, or use a unit in seconds",
			prefix, params.Calendar, limit.CalendarAlgorithm, params.Algorithm, limit.CalendarAlgorithm)
		return false
	}
	return true
}

// checkDefaultsCalendar reports the calendar settings of defaults that no
// rule could use: a timezone beside a unit in seconds there, or a calendar
// unit beside an algorithm other than fixed_window. (A timezone in
// defaults without a unit there is that of the rules with a calendar
// unit.) A calendar unit reported is dropped, so that the rules that
// inherit it do not report it again.
func (p *parser) checkDefaultsCalendar(s *settings) {
	if s.zoneWritten && s.unitWritten && s.calendar == "" {
		p.errorf(s.zoneLine, "timezone in defaults applies only to the calendar units, and the unit in defaults is %s; set a calendar unit or remove timezone", s.unit)
	}
	if s.calendar != "" && s.algorithmWritten && s.algorithm != limit.CalendarAlgorithm {
		p.errorf(s.unitLine, "unit %s in defaults counts only with algorithm %s, not %s (defaults' algorithm); set the calendar unit on the rules that need it, where it implies %s",
			s.calendar, limit.CalendarAlgorithm, s.algorithm, limit.CalendarAlgorithm)
		s.calendar, s.unit, s.unitLine = "", DefaultUnit, 0
	}
}
