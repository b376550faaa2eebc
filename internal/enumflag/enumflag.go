// Package enumflag parses the values of flags that take one of a few
// names (--store memory|redis, --log-format json|text), with one error
// message for all of them: `"x" is not one of a, b`.
//
// It only matches names: it must not hold the names of any flag, nor
// defaults; those belong to the type that declares the flag.
package enumflag

import (
	"fmt"
	"strings"
)

// Set sets *v to s if s is one of choices, or reports the choices and
// leaves *v unchanged.
func Set[T ~string](v *T, s string, choices ...T) error {
	for _, c := range choices {
		if string(c) == s {
			*v = c
			return nil
		}
	}
	names := make([]string, len(choices))
	for i, c := range choices {
		names[i] = string(c)
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}

// Index returns the index of s in names, or an error that reports the
// names, for enums kept as small integers.
func Index(s string, names []string) (int, error) {
	for i, name := range names {
		if name == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}
