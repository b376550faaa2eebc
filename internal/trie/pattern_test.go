package trie

import (
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     string
		segments string // joined with " "
	}{
		{name: "root", in: "/", want: "/"},
		{name: "literal", in: "/v1/user", want: "/v1/user", segments: "v1 user"},
		{name: "trailing slash dropped", in: "/v1/user/", want: "/v1/user", segments: "v1 user"},
		{name: "variable", in: "/v1/user/{id}/orders", want: "/v1/user/{id}/orders", segments: "v1 user {id} orders"},
		{name: "two variables", in: "/{app}/{id_2}", want: "/{app}/{id_2}", segments: "{app} {id_2}"},
		{name: "decoded literal", in: "/files/a b/caf\u00e9", want: "/files/a b/caf\u00e9", segments: "files a b caf\u00e9"},
		{name: "dots inside a literal", in: "/.well-known/a..b", want: "/.well-known/a..b", segments: ".well-known a..b"},
		{name: "case kept", in: "/V1/User", want: "/V1/User", segments: "V1 User"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, segs, err := ParsePattern(tt.in)
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParsePattern(%q): got %q, want %q", tt.in, got, tt.want)
			}
			if got := strings.Join(segs, " "); got != tt.segments {
				t.Errorf("ParsePattern(%q) segments: got %q, want %q", tt.in, got, tt.segments)
			}
		})
	}
}

func TestParsePatternErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr string // a part of the message
	}{
		{name: "empty", in: "", wantErr: "is empty"},
		{name: "relative", in: "v1/user", wantErr: `must start with "/"`},
		{name: "double slash", in: "/v1//user", wantErr: "empty segment"},
		{name: "only slashes", in: "//", wantErr: "empty segment"},
		{name: "two trailing slashes", in: "/v1//", wantErr: "empty segment"},
		{name: "dot", in: "/v1/./user", wantErr: `"." segment`},
		{name: "dot dot", in: "/v1/..", wantErr: `".." segment`},
		{name: "unnamed variable", in: "/v1/{}", wantErr: "unnamed variable"},
		{name: "variable not an identifier", in: "/v1/{a-b}", wantErr: "not an identifier"},
		{name: "variable starts with digit", in: "/v1/{1a}", wantErr: "not an identifier"},
		{name: "variable twice", in: "/{id}/x/{id}", wantErr: "variable {id} twice"},
		{name: "brace in literal", in: "/v1/user{id}", wantErr: "brace"},
		{name: "lone brace", in: "/v1/{id", wantErr: "brace"},
		{name: "percent", in: "/v1/a%20b", wantErr: "decoded"},
		{name: "backslash", in: "/v1\\user", wantErr: "never appears"},
		{name: "semicolon", in: "/v1/user;x", wantErr: "never appears"},
		{name: "query", in: "/v1/user?id=1", wantErr: "query strings"},
		{name: "fragment", in: "/v1/user#x", wantErr: "fragments"},
		{name: "wildcard", in: "/v1/*", wantErr: "wildcards"},
		{name: "control character", in: "/v1/a\tb", wantErr: "control character"},
		{name: "invalid utf-8", in: "/v1/\xff", wantErr: "utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, _, err := ParsePattern(tt.in)
			if err == nil {
				t.Fatalf("ParsePattern(%q): got %q and no error, want an error containing %q", tt.in, got, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParsePattern(%q) error: got %q, want it to contain %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestIsVar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "variable", in: "{id}", want: true},
		{name: "empty braces", in: "{}", want: true},
		{name: "literal", in: "id", want: false},
		{name: "open brace only", in: "{", want: false},
		{name: "brace inside", in: "a{id}", want: false},
		{name: "empty", in: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := IsVar(tt.in); got != tt.want {
				t.Errorf("IsVar(%q): got %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
