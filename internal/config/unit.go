package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxUnitSeconds is the longest unit in whole seconds that a
// time.Duration holds.
const maxUnitSeconds = math.MaxInt64 / int64(time.Second)

// unit returns the value of a unit field: whole seconds as a number, as in
// the original rule file, or a Go duration string ("500ms", "1m").
func (p *parser) unit(f field) (time.Duration, bool) {
	const how = `write whole seconds (60) or a duration like "500ms" or "1m"`
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		s := strings.TrimSpace(n.Value)
		d, err := time.ParseDuration(s)
		switch {
		case err != nil && s != "" && strings.Trim(s, "0123456789") == "":
			p.errorf(f.line, "unit %q has no time unit; write %s (seconds, without quotes) or %q", n.Value, s, s+"s")
			return 0, false
		case err != nil:
			p.errorf(f.line, "unit %q is not a duration; %s", n.Value, how)
			return 0, false
		case d <= 0:
			p.errorf(f.line, "unit %q is not positive; %s", n.Value, how)
			return 0, false
		}
		return d, true
	}
	i, fl, kind := number(n)
	switch {
	case kind == wholeNumber && i <= 0, kind == fraction && !(fl > 0), kind == outOfRange && fl < 0:
		p.errorf(f.line, "unit %s is not positive; %s", n.Value, how)
	case kind == wholeNumber && i <= maxUnitSeconds:
		return time.Duration(i) * time.Second, true
	case kind == wholeNumber, kind == outOfRange, kind == fraction && fl > float64(maxUnitSeconds):
		p.errorf(f.line, "unit %s seconds is too long", n.Value)
	case kind == fraction:
		// A number of seconds with a fraction is most likely a typo for a
		// duration: the original rule file's units are whole seconds.
		p.errorf(f.line, "unit %s is not a whole number of seconds; write a fraction of a second as a duration like %q", n.Value, durationHint(fl))
	default:
		p.wrongType(f, `whole seconds or a duration like "500ms"`)
	}
	return 0, false
}

// durationHint writes secs, a positive fraction of seconds, as a duration
// string: "1500ms" for 1.5.
func durationHint(secs float64) string {
	if ms := secs * 1000; ms == math.Trunc(ms) {
		return fmt.Sprintf("%dms", int64(ms))
	}
	return time.Duration(secs * float64(time.Second)).String()
}
