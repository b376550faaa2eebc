package config

import (
	"slices"
	"strings"
)

// This file reads the settings of limits keyed on a field of the request's
// JSON body, by: body:FIELD (docs/plans-and-tokens.md, "Keys from the request
// body"): the field's dotted path, and maxBody, the most bytes of a body the
// gateway holds to read it.

// DefaultMaxBody is how many bytes of a request's body the gateway reads
// for a body key when the limit sets no maxBody: an LLM request's model
// and user come at the top of a body of a few kilobytes.
const DefaultMaxBody = 64 << 10

// MinMaxBody and MaxMaxBody bound maxBody.
const (
	MinMaxBody = 1 << 10
	MaxMaxBody = 16 << 20
)

// MaxBodyPathDepth bounds the fields of a body key's path.
const MaxBodyPathDepth = 8

// checkBodyPath returns what is wrong with the path of a body key, "" if
// nothing.
func checkBodyPath(path string) string {
	fields := strings.Split(path, ".")
	switch {
	case !validQueryName(path):
		return "a body field path here is printable ASCII without spaces or commas, like model or params.name"
	case len(fields) > MaxBodyPathDepth:
		return "the field path is deeper than 8 fields"
	}
	for _, f := range fields {
		if f == "" {
			return "the field path has an empty field; write fields separated by single dots, like params.name"
		}
	}
	return ""
}

// Body reports whether b names a field of the request body.
func (b By) Body() bool {
	return slices.ContainsFunc(b.Parts(), func(p KeyPart) bool { return p.Kind == KeyBody })
}

// maxBody reads the maxBody field f of a limit keyed by by.
func (p *parser) maxBody(f field, by By) (int, bool) {
	v, ok := p.integer(f)
	switch {
	case !ok:
		return 0, false
	case !by.Body():
		p.errorf(f.line, "maxBody applies only to a limit keyed on the request body (by: body:FIELD); remove it")
		return 0, false
	case v < MinMaxBody || v > MaxMaxBody:
		p.errorf(f.line, "maxBody %d is outside %d..%d; it is how many bytes of a request's body are read for its key", v, MinMaxBody, MaxMaxBody)
		return 0, false
	}
	return int(v), true
}
