// Package query reads the raw query string of a request URL the one way
// the gateway reads it everywhere: parameters separated by '&' only (as
// the WHATWG URL standard and Go's net/url do, not on ';'), names and
// values unescaped as url.QueryUnescape does, without building a map.
// The counter keys of limits keyed on a query parameter (package ruleset)
// and the _method override (package proxy) both read queries with it,
// so that they can never disagree on what a query holds.
//
// It must not change a query it is given: Without returns a new one,
// every other parameter byte for byte as it was sent.
package query

import (
	"errors"
	"iter"
	"net/url"
	"strings"
)

// Errors of Value.
var (
	// ErrRepeated is returned for a parameter sent more than once.
	ErrRepeated = errors.New("sent more than once")
	// ErrBadEscape is returned for a value that is not validly escaped.
	ErrBadEscape = errors.New("not validly escaped")
)

// Param is one '&'-separated parameter of a raw query, as it was sent.
type Param struct {
	// Name and Value are the parts before and after the first '=', not
	// unescaped; Value is "" when there is no '='.
	Name, Value string
	// Start and End are the parameter's bounds in the query it was read
	// from: q[Start:End] is "Name=Value" as sent.
	Start, End int
}

// All returns the parameters of the raw query q, in order, empty ones
// (between two '&', or after a trailing one) included.
func All(q string) iter.Seq[Param] {
	return func(yield func(Param) bool) {
		for start := 0; start <= len(q); {
			end := strings.IndexByte(q[start:], '&')
			if end < 0 {
				end = len(q)
			} else {
				end += start
			}
			name, value, _ := strings.Cut(q[start:end], "=")
			if !yield(Param{Name: name, Value: value, Start: start, End: end}) {
				return
			}
			start = end + 1
		}
	}
}

// Named reports whether p's name is name: as sent, or once unescaped.
func (p Param) Named(name string) bool {
	if p.Name == name {
		return true
	}
	if !escaped(p.Name) {
		return false
	}
	u, err := url.QueryUnescape(p.Name)
	return err == nil && u == name
}

// Unescaped returns p's value unescaped, or ErrBadEscape. It allocates
// only for a value with an escape or a '+'.
func (p Param) Unescaped() (string, error) {
	if !escaped(p.Value) {
		return p.Value, nil
	}
	u, err := url.QueryUnescape(p.Value)
	if err != nil {
		return "", ErrBadEscape
	}
	return u, nil
}

// escaped reports whether s has a byte that unescaping changes.
func escaped(s string) bool {
	return strings.IndexByte(s, '%') >= 0 || strings.IndexByte(s, '+') >= 0
}

// Value returns the unescaped value of the parameter name in the raw
// query q ("" if it is absent or empty), ErrRepeated if it is sent more
// than once, or ErrBadEscape if its value is not validly escaped.
func Value(q, name string) (string, error) {
	var v string
	found := false
	for p := range All(q) {
		if !p.Named(name) {
			continue
		}
		if found {
			return "", ErrRepeated
		}
		found = true
		u, err := p.Unescaped()
		if err != nil {
			return "", err
		}
		v = u
	}
	return v, nil
}

// Values returns the values of every parameter name in the raw query q,
// in order, unescaped; a value that is not validly escaped as it was
// sent.
func Values(q, name string) []string {
	var vs []string
	for p := range All(q) {
		if p.Named(name) {
			v, err := p.Unescaped()
			if err != nil {
				v = p.Value
			}
			vs = append(vs, v)
		}
	}
	return vs
}

// Without returns the raw query q without any parameter name, every
// other parameter byte for byte as it was sent.
func Without(q, name string) string {
	var b strings.Builder
	kept := false
	for p := range All(q) {
		if p.Named(name) {
			continue
		}
		if kept {
			b.WriteByte('&')
		}
		kept = true
		b.WriteString(q[p.Start:p.End])
	}
	return b.String()
}
