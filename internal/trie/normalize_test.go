package trie

import (
	"errors"
	"net/url"
	"testing"
)

func TestNormalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{name: "root", in: "/", want: "/"},
		{name: "clean", in: "/v1/user/42", want: "/v1/user/42"},
		{name: "trailing slash kept", in: "/v1/user/", want: "/v1/user/"},
		{name: "double slash", in: "/v1//user", want: "/v1/user"},
		{name: "double slash at root", in: "//", want: "/"},
		{name: "many slashes", in: "///v1///user///", want: "/v1/user/"},
		{name: "dot", in: "/v1/./user", want: "/v1/user"},
		{name: "trailing dot", in: "/v1/user/.", want: "/v1/user"},
		{name: "dot slash", in: "/v1/user/./", want: "/v1/user/"},
		{name: "dot dot", in: "/v1/admin/../user", want: "/v1/user"},
		{name: "trailing dot dot", in: "/v1/user/..", want: "/v1"},
		{name: "dot dot slash", in: "/v1/user/../", want: "/v1/"},
		{name: "dot dot to root", in: "/v1/..", want: "/"},
		{name: "dot dot clamped at root", in: "/../x", want: "/x"},
		{name: "many dot dots clamped", in: "/a/../../../x/", want: "/x/"},
		{name: "dots that are not segments", in: "/v1/.well-known/a..b/...", want: "/v1/.well-known/a..b/..."},
		{name: "encoded dot dot", in: "/v1/admin/%2e%2e/user", want: "/v1/user"},
		{name: "encoded dot dot upper", in: "/v1/admin/%2E%2E/user", want: "/v1/user"},
		{name: "half encoded dot dot", in: "/v1/admin/.%2e/user", want: "/v1/user"},
		{name: "encoded dot", in: "/v1/%2e/user", want: "/v1/user"},
		{name: "escape decoded", in: "/v1/%41b%63", want: "/v1/Abc"},
		{name: "mixed case escapes", in: "/%c3%A9t%C3%a9", want: "/été"},
		{name: "encoded space", in: "/files/a%20b", want: "/files/a b"},
		{name: "encoded percent stays decoded once", in: "/files/100%25", want: "/files/100%"},
		{name: "double encoded dot is not a dot", in: "/a/%252e%252e/b", want: "/a/%2e%2e/b"},
		{name: "encoded question mark", in: "/a%3Fb", want: "/a?b"},
		{name: "raw utf-8", in: "/caf\u00e9", want: "/caf\u00e9"},
		{name: "segment parameter", in: "/v1/user;jsessionid=1/42", want: "/v1/user/42"},
		{name: "parameter at end", in: "/v1/user;x=1", want: "/v1/user"},
		{name: "parameter-only segment is empty", in: "/v1/;x/user", want: "/v1/user"},
		{name: "parameter-only last segment keeps slash", in: "/v1/user/;x", want: "/v1/user/"},
		{name: "parameter on dot dot", in: "/v1/admin/..;x=1/user", want: "/v1/user"},
		{name: "encoded semicolon is a parameter", in: "/v1/user%3Bx/42", want: "/v1/user/42"},
		{name: "parameter on root", in: "/;x", want: "/"},

		{name: "empty", in: "", wantErr: ErrNotAbsolute},
		{name: "relative", in: "v1/user", wantErr: ErrNotAbsolute},
		{name: "asterisk form", in: "*", wantErr: ErrNotAbsolute},
		{name: "lone percent", in: "/a%", wantErr: ErrBadEscape},
		{name: "short escape", in: "/a%4", wantErr: ErrBadEscape},
		{name: "non hex escape", in: "/a%zz", wantErr: ErrBadEscape},
		{name: "half hex escape", in: "/a%4g/b", wantErr: ErrBadEscape},
		{name: "encoded slash", in: "/a%2Fb", wantErr: ErrEncodedSlash},
		{name: "encoded slash lower", in: "/a%2fb", wantErr: ErrEncodedSlash},
		{name: "backslash", in: "/a\\b", wantErr: ErrBackslash},
		{name: "encoded backslash", in: "/a%5Cb", wantErr: ErrBackslash},
		{name: "encoded backslash lower", in: "/a%5c..%5cb", wantErr: ErrBackslash},
		{name: "nul", in: "/a\x00b", wantErr: ErrNUL},
		{name: "encoded nul", in: "/a%00b", wantErr: ErrNUL},
		{name: "encoded newline", in: "/a%0Ab", wantErr: ErrControlChar},
		{name: "raw tab", in: "/a\tb", wantErr: ErrControlChar},
		{name: "encoded del", in: "/a%7F", wantErr: ErrControlChar},
		{name: "overlong dot", in: "/a/%C0%AE%C0%AE/b", wantErr: ErrInvalidUTF8},
		{name: "overlong slash", in: "/a%c0%afb", wantErr: ErrInvalidUTF8},
		{name: "lone continuation byte", in: "/a%80", wantErr: ErrInvalidUTF8},
		{name: "raw invalid utf-8", in: "/a\xffb", wantErr: ErrInvalidUTF8},
		{name: "encoded surrogate", in: "/%ED%A0%80", wantErr: ErrInvalidUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Normalize(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Normalize(%q) error: got %v, want %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Normalize(%q): got %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestNormalizeRoundTrip checks what the proxy relies on: the cleaned path,
// set as URL.Path and escaped again for the upstream, normalizes to itself.
func TestNormalizeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"/a%20b/100%25/%3F/%23/caf%C3%A9", "/x/%252F", "/v1/user/"} {
		clean, err := Normalize(in)
		if err != nil {
			t.Fatalf("Normalize(%q): %v", in, err)
		}
		again := (&url.URL{Path: clean}).EscapedPath()
		got, err := Normalize(again)
		if err != nil {
			t.Fatalf("Normalize(%q) (escaped again from %q): %v", again, clean, err)
		}
		if got != clean {
			t.Errorf("Normalize(%q) (escaped again): got %q, want %q", again, got, clean)
		}
	}
}

func TestNormalizeErrorsAreDistinct(t *testing.T) {
	t.Parallel()
	errs := []error{ErrNotAbsolute, ErrBadEscape, ErrEncodedSlash, ErrBackslash, ErrNUL, ErrControlChar, ErrInvalidUTF8}
	seen := map[string]bool{}
	for _, err := range errs {
		if seen[err.Error()] {
			t.Errorf("error text %q is used twice", err)
		}
		seen[err.Error()] = true
	}
}

func TestNormalizeCleanDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"/", "/v1/user/42", "/v1/user/", "/.well-known/x", "/caf\u00e9/a..b"} {
		var got string
		allocs := testing.AllocsPerRun(100, func() {
			got, _ = Normalize(in)
		})
		if allocs != 0 {
			t.Errorf("Normalize(%q): got %v allocs, want 0", in, allocs)
		}
		if got != in {
			t.Errorf("Normalize(%q): got %q, want the input", in, got)
		}
	}
}
