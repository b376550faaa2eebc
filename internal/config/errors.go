package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem with a rule file.
type Error struct {
	// File is the rule file's path.
	File string
	// Line is the 1-based line of the problem, or 0 when it concerns the
	// whole file.
	Line int
	// Msg says what is wrong and what to do, as a plain sentence.
	Msg string
}

// Error formats e as "file:line: msg", leaving out the line when it is 0
// (and the file when it is "").
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Errors are all the problems found in one rule file, sorted by line and
// then by message. Parse returns every problem it finds rather than the
// first, so that `gateway validate` can list them all.
type Errors []*Error

// Error formats the problems one a line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the problems as errors, so that errors.As can find an
// *Error.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// sorted returns es sorted by line and message, without repeats. The same
// problem can be found more than once when a YAML alias or a default is
// used in several places; it is reported once.
func (es Errors) sorted() Errors {
	out := slices.Clone(es)
	slices.SortStableFunc(out, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Msg, b.Msg))
	})
	return slices.CompactFunc(out, func(a, b *Error) bool {
		return a.Line == b.Line && a.Msg == b.Msg
	})
}
