package config

import (
	"cmp"
	"errors"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"go.yaml.in/yaml/v3"
)

// settings are the limit settings that defaults, an app's total and a rule
// share, with the line each was set on (0 when built in).
type settings struct {
	algorithm string
	unit      time.Duration
	precision int
	burst     int64
	warmup    time.Duration
	lock      time.Duration
	// calendar is the calendar unit, "" when unit is in seconds; zone
	// the timezone, "" for UTC. The *Written fields report whether the
	// section itself set the setting.
	calendar                                   limit.Calendar
	zone                                       string
	zoneWritten, algorithmWritten, unitWritten bool

	algorithmLine, unitLine, precisionLine, burstLine, warmupLine, lockLine, zoneLine int

	// written are the optional settings (those only some algorithms
	// read) set in the section these settings were read from, and
	// inherited those set in defaults; the others are built in.
	// defaultsAlgorithm is the algorithm of defaults.
	written, inherited limit.Setting
	defaultsAlgorithm  string
}

func builtinSettings() settings {
	return settings{
		algorithm: limit.DefaultAlgorithm,
		unit:      DefaultUnit,
		precision: limit.DefaultPrecision,
	}
}

// readSettings returns base overridden by the settings in fs, and whether
// all of them were valid. A setting that is not valid is reported and
// leaves base's value, so that one bad default is reported once, not again
// by every rule that inherits it.
func (p *parser) readSettings(fs map[string]field, base settings) (settings, bool) {
	s, ok := base, true
	s.inherited, s.written, s.defaultsAlgorithm = base.written, 0, base.algorithm
	s.zoneWritten, s.algorithmWritten, s.unitWritten = false, false, false
	if f, set := fs["algorithm"]; set {
		if name, good := p.str(f); !good {
			ok = false
		} else if _, known := limit.Lookup(name); !known {
			p.errorf(f.line, "unknown algorithm %q; use one of: %s", name, strings.Join(limit.Algorithms(), ", "))
			ok = false
		} else {
			s.algorithm, s.algorithmLine, s.algorithmWritten = name, f.line, true
		}
	}
	if f, set := fs["unit"]; set {
		if u, c, good := p.unitOrCalendar(f); good {
			s.unit, s.calendar, s.unitLine, s.unitWritten = u, c, f.line, true
		} else {
			ok = false
		}
	}
	if f, set := fs["precision"]; set {
		if v, good := p.integer(f); !good {
			ok = false
		} else if v < 1 || v > limit.MaxPrecision {
			p.errorf(f.line, "precision %d is outside 1..%d; it is the number of buckets a sliding window is split into", v, limit.MaxPrecision)
			ok = false
		} else {
			s.precision, s.precisionLine = int(v), f.line
			s.written |= limit.SettingPrecision
		}
	}
	if f, set := fs["burst"]; set {
		if v, good := p.integer(f); !good {
			ok = false
		} else if v < 0 || v > limit.MaxLimit {
			p.errorf(f.line, "burst %d is outside 0..%d; it is the bucket capacity of token_bucket and leaky_bucket (0 means the limit)", v, int64(limit.MaxLimit))
			ok = false
		} else {
			s.burst, s.burstLine = v, f.line
			s.written |= limit.SettingBurst
		}
	}
	if f, set := fs["warmup"]; set {
		if d, good := p.warmup(f); good {
			s.warmup, s.warmupLine = d, f.line
			s.written |= limit.SettingWarmup
		} else {
			ok = false
		}
	}
	if f, set := fs["lockSeconds"]; set {
		if v, good := p.integer(f); !good {
			ok = false
		} else if v < 0 {
			p.errorf(f.line, "lockSeconds %d is negative; set how many seconds a caller stays denied once it is limited, or 0 for no lockout", v)
			ok = false
		} else if v > maxLockSeconds {
			p.errorf(f.line, "lockSeconds %d is too long", v)
			ok = false
		} else {
			s.lock, s.lockLine = time.Duration(v)*time.Second, f.line
		}
	}
	if f, set := fs["timezone"]; set {
		if z, good := p.timezone(f); good {
			s.zone, s.zoneLine, s.zoneWritten = z, f.line, true
		} else {
			ok = false
		}
	}
	return s, ok
}

// warmup returns the value of a warmup field: a Go duration string
// ("30s"), or 0.
func (p *parser) warmup(f field) (time.Duration, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		v := strings.TrimSpace(n.Value)
		d, err := time.ParseDuration(v)
		switch {
		case err != nil && v != "" && strings.Trim(v, "0123456789") == "":
			p.errorf(f.line, "warmup %q has no time unit; write %q", n.Value, v+"s")
		case err != nil:
			p.errorf(f.line, "warmup %q is not a duration; write one like \"30s\" or \"2m\"", n.Value)
		case d < 0:
			p.errorf(f.line, "warmup %q is negative; write a duration like \"30s\", or 0 for no warm-up", n.Value)
		default:
			return d, true
		}
		return 0, false
	}
	switch i, _, kind := number(n); {
	case kind == wholeNumber && i == 0:
		return 0, true
	case kind != notNumber:
		p.errorf(f.line, "warmup %s has no time unit; write a duration like %q", n.Value, n.Value+"s")
	default:
		p.wrongType(f, `a duration like "30s"`)
	}
	return 0, false
}

// params returns the limit.Params of a limit n with settings s.
//
// An optional setting (precision, burst, warmup) applies when the
// section sets it, and when it comes from defaults or is built in, only
// if the algorithm reads it: defaults.precision is for the rules that use
// sliding_window, and does not make a token_bucket rule invalid. A
// setting from defaults also applies to the rules of the defaults'
// algorithm, so that defaults setting what their own algorithm does not
// read are reported.
func (s *settings) params(n int64) limit.Params {
	alg := s.algorithm
	if s.calendar != "" && !s.algorithmWritten && (s.algorithmLine == 0 || s.unitWritten) {
		// A calendar unit implies the one algorithm that counts it, over
		// the built-in algorithm and over that of defaults when the
		// section sets the unit.
		alg = limit.CalendarAlgorithm
	}
	var reads limit.Setting
	if a, ok := limit.Lookup(alg); ok {
		reads = a.Reads()
	}
	applies := func(opt limit.Setting) bool {
		return s.written&opt != 0 || reads&opt != 0 ||
			s.inherited&opt != 0 && alg == s.defaultsAlgorithm
	}
	p := limit.Params{
		Algorithm: alg,
		Limit:     n,
		Window:    s.unit,
		Lock:      s.lock,
	}
	if s.calendar != "" {
		p.Calendar, p.Zone = s.calendar, cmp.Or(s.zone, "UTC")
	}
	if applies(limit.SettingPrecision) {
		p.Precision = s.precision
	}
	if applies(limit.SettingBurst) {
		p.Burst = s.burst
	}
	if applies(limit.SettingWarmup) {
		p.Warmup = s.warmup
	}
	return p
}

// validate checks the Params of a limit and reports a problem on the line
// of the setting it is about (limit.SettingError), where that setting was
// written (in the section itself or in defaults), else on line.
func (p *parser) validate(params *limit.Params, s *settings, limitLine, line int, prefix string) bool {
	if !p.checkCalendar(params, s, prefix) {
		return false
	}
	err := params.Validate()
	if err == nil {
		return true
	}
	if se := (*limit.SettingError)(nil); errors.As(err, &se) {
		if l := s.line(se.Setting, limitLine); l > 0 {
			line = l
		}
	}
	p.errorf(line, "%s%s", prefix, err)
	return false
}

// line returns the line where the setting named setting (as in the rule
// file) was written, 0 when it is built in. limitLine is the line of the
// limit, which settings do not hold.
func (s *settings) line(setting string, limitLine int) int {
	switch setting {
	case "limit":
		return limitLine
	case "algorithm":
		return s.algorithmLine
	case "unit":
		return s.unitLine
	case "precision":
		return s.precisionLine
	case "burst":
		return s.burstLine
	case "warmup":
		return s.warmupLine
	case "lockSeconds":
		return s.lockLine
	case "timezone":
		return s.zoneLine
	}
	return 0
}
