package query

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, q, param, want string
		err                  error
	}{
		{name: "plain", q: "a=1&user=alice&b=2", param: "user", want: "alice"},
		{name: "absent", q: "a=1", param: "user", want: ""},
		{name: "empty query", q: "", param: "user", want: ""},
		{name: "no value", q: "user&a=1", param: "user", want: ""},
		{name: "escaped value", q: "user=al%7Cce+b", param: "user", want: "al|ce b"},
		{name: "escaped name", q: "us%65r=bob", param: "user", want: "bob"},
		{name: "plus in name", q: "a+b=1", param: "a b", want: "1"},
		{name: "semicolon is not a separator", q: "user=alice;n=1", param: "user", want: "alice;n=1"},
		{name: "repeated", q: "user=a&user=b", param: "user", err: ErrRepeated},
		{name: "repeated, once escaped", q: "user=a&%75ser=b", param: "user", err: ErrRepeated},
		{name: "bad escape", q: "user=%zz", param: "user", err: ErrBadEscape},
		{name: "bad escape in another name", q: "%zz=1&user=c", param: "user", want: "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Value(tt.q, tt.param)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("Value(%q, %q): got %q, %v, want %q, %v", tt.q, tt.param, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestValuesAndWithout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, q, without string
		values           []string
	}{
		{name: "none", q: "a=1&b=2", without: "a=1&b=2"},
		{name: "one", q: "a=1&_method=PUT&b=2", values: []string{"PUT"}, without: "a=1&b=2"},
		{name: "escaped name", q: "%5Fmethod=put&a=%41", values: []string{"put"}, without: "a=%41"},
		{name: "bad escape kept as sent", q: "_method=%zz", values: []string{"%zz"}, without: ""},
		{name: "twice", q: "_method=A&x&_method=B", values: []string{"A", "B"}, without: "x"},
		{name: "others byte for byte", q: "b=%2f+&&_method=X&c", values: []string{"X"}, without: "b=%2f+&&c"},
		{name: "trailing separator", q: "a&", without: "a&"},
		{name: "leading separators", q: "&&_method=X&a", values: []string{"X"}, without: "&&a"},
		{name: "empty", q: "", without: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Values(tt.q, "_method"); !slices.Equal(got, tt.values) {
				t.Errorf("Values(%q): got %q, want %q", tt.q, got, tt.values)
			}
			if got := Without(tt.q, "_method"); got != tt.without {
				t.Errorf("Without(%q): got %q, want %q", tt.q, got, tt.without)
			}
		})
	}
}

// FuzzQuery checks that the three readers agree: Without leaves no
// parameter Values finds and changes no other, and Value sees what
// Values sees.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "_method=PUT&a", "%5Fmethod=x&&", "a=%zz&_method=%41", ""} {
		f.Add(s, "_method")
	}
	f.Fuzz(func(t *testing.T, q, name string) {
		vs := Values(q, name)
		w := Without(q, name)
		if len(Values(w, name)) != 0 && name != "" {
			t.Fatalf("Without(%q, %q) = %q still holds %q", q, name, w, name)
		}
		if len(vs) == 0 && w != q {
			t.Fatalf("Without(%q, %q) = %q changed a query without %q", q, name, w, name)
		}
		for p := range All(w) {
			if !strings.Contains(q, w[p.Start:p.End]) {
				t.Fatalf("Without(%q, %q) = %q made up %q", q, name, w, w[p.Start:p.End])
			}
		}
		v, err := Value(q, name)
		switch {
		case len(vs) > 1:
			// A badly escaped value before the second is reported first.
			if !errors.Is(err, ErrRepeated) && !errors.Is(err, ErrBadEscape) {
				t.Fatalf("Value(%q, %q): got %q, %v, want an error for %q", q, name, v, err, vs)
			}
		case len(vs) == 1 && err == nil:
			if v != vs[0] {
				t.Fatalf("Value(%q, %q) = %q, Values = %q", q, name, v, vs)
			}
		case len(vs) == 0:
			if v != "" || err != nil {
				t.Fatalf("Value(%q, %q): got %q, %v for an absent parameter", q, name, v, err)
			}
		}
	})
}

func BenchmarkValue(b *testing.B) {
	const q = "page=2&sort=name&user=alice&lang=en"
	b.ReportAllocs()
	for b.Loop() {
		if v, err := Value(q, "user"); v != "alice" || err != nil {
			b.Fatal(v, err)
		}
	}
}
