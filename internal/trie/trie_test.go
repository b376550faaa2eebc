package trie

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// spec is a rule for a test: a pattern and optional methods, written
// "/v1/user" or "/v1/user GET,POST". Its value is the spec itself, so a
// test can tell apart rules with one pattern and different methods.
type spec string

func (s spec) parts() (pattern string, methods []string) {
	pattern, m, ok := strings.Cut(string(s), " ")
	if ok {
		methods = strings.Split(m, ",")
	}
	return pattern, methods
}

func build(t testing.TB, opts Options, specs ...spec) *Trie[spec] {
	t.Helper()
	tr := New[spec](opts)
	for _, s := range specs {
		pattern, methods := s.parts()
		if err := tr.Insert(pattern, methods, s); err != nil {
			t.Fatalf("Insert(%q, %q): %v", pattern, methods, err)
		}
	}
	return tr
}

func TestMatch(t *testing.T) {
	t.Parallel()
	seed001 := []spec{"/v1/user", "/v1/order"}
	tests := []struct {
		name            string
		rules           []spec
		caseInsensitive bool
		method          string
		path            string
		want            spec // "" for no match
		wantPattern     string
	}{
		{name: "exact", rules: seed001, method: "GET", path: "/v1/user", want: "/v1/user"},
		{name: "trailing slash", rules: seed001, method: "GET", path: "/v1/user/", want: "/v1/user"},
		{name: "prefix", rules: seed001, method: "GET", path: "/v1/user/42", want: "/v1/user"},
		{name: "deep prefix", rules: seed001, method: "GET", path: "/v1/user/42/orders/7", want: "/v1/user"},
		{name: "not a segment prefix", rules: seed001, method: "GET", path: "/v1/username", want: ""},
		{name: "parent is not matched", rules: seed001, method: "GET", path: "/v1", want: ""},
		{name: "root path", rules: seed001, method: "GET", path: "/", want: ""},
		{name: "other version", rules: seed001, method: "GET", path: "/v2/user", want: ""},
		{name: "case-sensitive by default", rules: seed001, method: "GET", path: "/V1/User", want: ""},
		{name: "not absolute", rules: []spec{"/"}, method: "GET", path: "v1/user", want: ""},
		{name: "empty path", rules: []spec{"/"}, method: "GET", path: "", want: ""},

		{name: "root matches everything", rules: []spec{"/"}, method: "GET", path: "/anything/at/all", want: "/"},
		{name: "root matches root", rules: []spec{"/"}, method: "GET", path: "/", want: "/"},
		{name: "root loses to any deeper rule", rules: []spec{"/", "/v1"}, method: "GET", path: "/v1/x", want: "/v1"},
		{name: "root is the fallback", rules: []spec{"/", "/v1"}, method: "GET", path: "/v2/x", want: "/"},

		{name: "variable", rules: []spec{"/v1/user/{id}/orders"}, method: "GET", path: "/v1/user/42/orders", want: "/v1/user/{id}/orders"},
		{name: "variable prefix", rules: []spec{"/v1/user/{id}"}, method: "GET", path: "/v1/user/42/orders", want: "/v1/user/{id}"},
		{name: "variable needs a segment", rules: []spec{"/v1/user/{id}"}, method: "GET", path: "/v1/user", want: ""},
		{name: "variable needs a non-empty segment", rules: []spec{"/v1/user/{id}"}, method: "GET", path: "/v1/user/", want: ""},
		{name: "variable is one segment", rules: []spec{"/v1/{id}/orders"}, method: "GET", path: "/v1/a/b/orders", want: ""},
		{name: "variable only", rules: []spec{"/{app}"}, method: "GET", path: "/x/y", want: "/{app}"},

		{name: "deeper beats shallower", rules: []spec{"/v1/user", "/v1/user/{id}/orders"}, method: "GET", path: "/v1/user/42/orders", want: "/v1/user/{id}/orders"},
		{name: "shallower when deeper does not match", rules: []spec{"/v1/user", "/v1/user/{id}/orders"}, method: "GET", path: "/v1/user/42/invoices", want: "/v1/user"},
		{name: "deeper variable beats shallower literal", rules: []spec{"/v1/user", "/v1/{x}/{y}"}, method: "GET", path: "/v1/user/42", want: "/v1/{x}/{y}"},
		{name: "literal beats variable", rules: []spec{"/v1/{id}", "/v1/user"}, method: "GET", path: "/v1/user", want: "/v1/user"},
		{name: "variable when literal differs", rules: []spec{"/v1/{id}", "/v1/user"}, method: "GET", path: "/v1/order", want: "/v1/{id}"},
		{name: "first difference decides", rules: []spec{"/a/{x}/c", "/{y}/b/c"}, method: "GET", path: "/a/b/c", want: "/a/{x}/c"},
		{name: "first difference decides other order", rules: []spec{"/{y}/b/c", "/a/{x}/c"}, method: "GET", path: "/a/b/c", want: "/a/{x}/c"},
		{name: "literal later does not outweigh earlier", rules: []spec{"/{a}/b/c/d", "/a/{b}/{c}/{d}"}, method: "GET", path: "/a/b/c/d", want: "/a/{b}/{c}/{d}"},

		{name: "backtrack from dead-end literal", rules: []spec{"/a/b/c", "/a/{x}/d"}, method: "GET", path: "/a/b/d", want: "/a/{x}/d"},
		{name: "backtrack to shallower", rules: []spec{"/a/b/c", "/a"}, method: "GET", path: "/a/b/d", want: "/a"},
		{name: "backtrack several levels", rules: []spec{"/a/b/c/d/e", "/a/{x}/c/d/f", "/{y}/b"}, method: "GET", path: "/a/b/c/d/f", want: "/a/{x}/c/d/f"},
		{name: "backtrack keeps literal at equal depth", rules: []spec{"/a/b/{z}", "/a/{x}/c"}, method: "GET", path: "/a/b/c", want: "/a/b/{z}"},

		{name: "method rule beats any method", rules: []spec{"/v1/user", "/v1/user GET"}, method: "GET", path: "/v1/user/1", want: "/v1/user GET"},
		{name: "method rule beats any method other order", rules: []spec{"/v1/user GET", "/v1/user"}, method: "GET", path: "/v1/user/1", want: "/v1/user GET"},
		{name: "any method when method differs", rules: []spec{"/v1/user", "/v1/user GET"}, method: "POST", path: "/v1/user/1", want: "/v1/user"},
		{name: "method mismatch does not match", rules: []spec{"/v1/user GET"}, method: "POST", path: "/v1/user", want: ""},
		{name: "method list", rules: []spec{"/v1/user GET,POST"}, method: "POST", path: "/v1/user", want: "/v1/user GET,POST"},
		{name: "method mismatch falls back to shallower", rules: []spec{"/v1", "/v1/user GET"}, method: "DELETE", path: "/v1/user", want: "/v1"},
		{name: "method mismatch falls back to variable", rules: []spec{"/v1/user PUT", "/v1/{id}"}, method: "GET", path: "/v1/user", want: "/v1/{id}"},
		{name: "depth beats method", rules: []spec{"/v1 GET", "/v1/user"}, method: "GET", path: "/v1/user", want: "/v1/user"},
		{name: "literal beats method", rules: []spec{"/v1/{id} GET", "/v1/user"}, method: "GET", path: "/v1/user", want: "/v1/user"},
		{name: "methods are case-sensitive", rules: []spec{"/v1/user GET"}, method: "get", path: "/v1/user", want: ""},
		{name: "variable names do not matter", rules: []spec{"/x/{a} GET", "/x/{b} POST"}, method: "POST", path: "/x/1", want: "/x/{b} POST"},

		{name: "case-insensitive", rules: seed001, caseInsensitive: true, method: "GET", path: "/V1/USER/42", want: "/v1/user"},
		{name: "case-insensitive rule written upper", rules: []spec{"/V1/User"}, caseInsensitive: true, method: "GET", path: "/v1/user", want: "/V1/User", wantPattern: "/V1/User"},
		{name: "case-insensitive mixed", rules: []spec{"/V1/User"}, caseInsensitive: true, method: "GET", path: "/v1/uSeR", want: "/V1/User"},
		{name: "case-insensitive not a prefix", rules: seed001, caseInsensitive: true, method: "GET", path: "/V1/UserName", want: ""},
		{name: "case-insensitive is ascii only", rules: []spec{"/caf\u00e9"}, caseInsensitive: true, method: "GET", path: "/CAF\u00c9", want: ""},
		{name: "case-insensitive ascii part of utf-8", rules: []spec{"/caf\u00e9"}, caseInsensitive: true, method: "GET", path: "/CAF\u00e9", want: "/caf\u00e9"},
		{name: "case-insensitive no unicode folding", rules: []spec{"/k"}, caseInsensitive: true, method: "GET", path: "/\u212a", want: ""},
		{name: "case-insensitive long segment", rules: []spec{"/" + spec(strings.Repeat("a", 200))}, caseInsensitive: true, method: "GET", path: "/" + strings.Repeat("A", 200) + "/x", want: "/" + spec(strings.Repeat("a", 200))},
		{name: "case-insensitive long segment mismatch", rules: []spec{"/" + spec(strings.Repeat("a", 200))}, caseInsensitive: true, method: "GET", path: "/" + strings.Repeat("A", 199) + "B", want: ""},
		{name: "case-insensitive long lower segment", rules: []spec{"/" + spec(strings.Repeat("A", 200))}, caseInsensitive: true, method: "GET", path: "/" + strings.Repeat("a", 200), want: "/" + spec(strings.Repeat("A", 200))},
		{name: "case-insensitive backtracking", rules: []spec{"/A/B/C", "/a/{x}/d"}, caseInsensitive: true, method: "GET", path: "/a/b/D", want: "/a/{x}/d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, Options{CaseInsensitive: tt.caseInsensitive}, tt.rules...)
			got, pattern, ok := tr.Match(tt.method, tt.path)
			if got != tt.want {
				t.Errorf("Match(%q, %q): got %q, want %q", tt.method, tt.path, got, tt.want)
			}
			if ok != (tt.want != "") {
				t.Errorf("Match(%q, %q) ok: got %v, want %v", tt.method, tt.path, ok, tt.want != "")
			}
			wantPattern := tt.wantPattern
			if wantPattern == "" {
				wantPattern, _ = tt.want.parts()
			}
			if pattern != wantPattern {
				t.Errorf("Match(%q, %q) pattern: got %q, want %q", tt.method, tt.path, pattern, wantPattern)
			}
		})
	}
}

func TestMatchEmptyTrie(t *testing.T) {
	t.Parallel()
	var zero Trie[int]
	for name, tr := range map[string]*Trie[int]{"zero value": &zero, "New": New[int](Options{})} {
		if v, pattern, ok := tr.Match("GET", "/"); ok || v != 0 || pattern != "" {
			t.Errorf("%s: Match: got %v, %q, %v, want 0, \"\", false", name, v, pattern, ok)
		}
		if got := tr.Explain("GET", "/"); len(got) != 0 {
			t.Errorf("%s: Explain: got %v, want none", name, got)
		}
		if got := tr.Len(); got != 0 {
			t.Errorf("%s: Len: got %d, want 0", name, got)
		}
	}
	if err := zero.Insert("/a", nil, 1); err != nil {
		t.Fatalf("zero value Insert: %v", err)
	}
	if v, _, _ := zero.Match("GET", "/a/b"); v != 1 {
		t.Errorf("zero value Match after Insert: got %v, want 1", v)
	}
}

func TestInsert(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		rules           []spec
		caseInsensitive bool
		insert          spec
		wantErr         string // "" for success; else a part of the message
		wantDuplicate   bool
	}{
		{name: "first", insert: "/v1/user"},
		{name: "same pattern other method", rules: []spec{"/v1/user GET"}, insert: "/v1/user POST"},
		{name: "method and any method", rules: []spec{"/v1/user GET"}, insert: "/v1/user"},
		{name: "any method and method", rules: []spec{"/v1/user"}, insert: "/v1/user GET"},
		{name: "case differs when case-sensitive", rules: []spec{"/v1/user"}, insert: "/v1/User"},
		{name: "literal and variable", rules: []spec{"/v1/user"}, insert: "/v1/{id}"},

		{name: "same pattern", rules: []spec{"/v1/user"}, insert: "/v1/user", wantErr: `api pattern "/v1/user" is given twice for every method`, wantDuplicate: true},
		{name: "same pattern with trailing slash", rules: []spec{"/v1/user"}, insert: "/v1/user/", wantErr: "given twice", wantDuplicate: true},
		{name: "same method", rules: []spec{"/v1/user GET"}, insert: "/v1/user GET", wantErr: "given twice for method GET", wantDuplicate: true},
		{name: "overlapping methods", rules: []spec{"/v1/user GET,POST"}, insert: "/v1/user PUT,POST", wantErr: "for method POST", wantDuplicate: true},
		{name: "variable names differ", rules: []spec{"/x/{a}"}, insert: "/x/{b}", wantErr: `"/x/{b}" is the same as "/x/{a}", both for every method`, wantDuplicate: true},
		{name: "case differs when case-insensitive", rules: []spec{"/v1/user"}, caseInsensitive: true, insert: "/V1/User", wantErr: `is the same as "/v1/user"`, wantDuplicate: true},

		{name: "bad pattern", insert: "/v1//user", wantErr: "empty segment"},
		{name: "lower-case method", insert: "/v1/user get", wantErr: `method "get", which is not an upper-case HTTP method`},
		{name: "method with space", insert: "/v1/user G\tET", wantErr: "not an upper-case HTTP method"},
		{name: "empty method", insert: "/v1/user GET,", wantErr: "empty method"},
		{name: "method twice", insert: "/v1/user GET,GET", wantErr: "lists method GET twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, Options{CaseInsensitive: tt.caseInsensitive}, tt.rules...)
			pattern, methods := tt.insert.parts()
			err := tr.Insert(pattern, methods, tt.insert)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Insert(%q, %q): %v", pattern, methods, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Insert(%q, %q): got no error, want one containing %q", pattern, methods, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("Insert(%q, %q) error: got %q, want it to contain %q", pattern, methods, err, tt.wantErr)
			}
			if got := errors.Is(err, ErrDuplicate); got != tt.wantDuplicate {
				t.Errorf("Insert(%q, %q) error %v is ErrDuplicate: got %v, want %v", pattern, methods, err, got, tt.wantDuplicate)
			}
			wantLen := len(tt.rules)
			if err == nil {
				wantLen++
			}
			if got := tr.Len(); got != wantLen {
				t.Errorf("Len after Insert: got %d, want %d", got, wantLen)
			}
		})
	}
}

// TestInsertFailureLeavesTrieUnchanged checks that a rejected rule does not
// half-apply: the rules before it still match as before.
func TestInsertFailureLeavesTrieUnchanged(t *testing.T) {
	t.Parallel()
	tr := build(t, Options{}, "/v1/user GET,POST")
	if err := tr.Insert("/v1/user", []string{"PUT", "POST"}, "new"); err == nil {
		t.Fatal("Insert of an overlapping method: got no error")
	}
	if got, _, ok := tr.Match("PUT", "/v1/user"); ok {
		t.Errorf("Match(PUT) after a rejected Insert: got %q, want no match", got)
	}
}

// TestInsertCopiesMethods checks that the caller may reuse its slice.
func TestInsertCopiesMethods(t *testing.T) {
	t.Parallel()
	tr := New[int](Options{})
	methods := []string{"GET"}
	if err := tr.Insert("/a", methods, 1); err != nil {
		t.Fatal(err)
	}
	methods[0] = "POST"
	if _, _, ok := tr.Match("GET", "/a"); !ok {
		t.Errorf("Match(GET) after the caller changed its slice: got no match, want /a")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	for _, ci := range []bool{false, true} {
		tr := build(t, Options{CaseInsensitive: ci},
			"/", "/v1/user", "/v1/user GET", "/v1/user/{id}/orders", "/v1/{x}/d", "/v1/user/b/c",
			"/"+spec(strings.Repeat("l", 300)))
		for _, path := range []string{"/v1/user/42/orders/7", "/V1/USER/b/d", "/v1/username", "/", "/" + strings.Repeat("L", 300), "/" + strings.Repeat("Ab", 60)} {
			var ok bool
			allocs := testing.AllocsPerRun(100, func() {
				_, _, ok = tr.Match("GET", path)
			})
			if allocs != 0 {
				t.Errorf("CaseInsensitive %v: Match(GET, %q): got %v allocs, want 0", ci, path, allocs)
			}
			_ = ok
		}
	}
}

// TestMatchConcurrent runs Match from many goroutines for the race detector.
func TestMatchConcurrent(t *testing.T) {
	t.Parallel()
	tr := build(t, Options{CaseInsensitive: true}, "/", "/v1/user", "/v1/user/{id} GET", "/v1/{x}/d")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				path := fmt.Sprintf("/v1/user/%d", i+g)
				if got, _, _ := tr.Match("GET", path); got != "/v1/user/{id} GET" {
					t.Errorf("Match(GET, %q): got %q, want %q", path, got, "/v1/user/{id} GET")
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestInsertDuplicateError checks what a *DuplicateError tells about the
// rule inserted before.
func TestInsertDuplicateError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		caseInsensitive bool
		first, second   spec
		want            DuplicateError[spec]
	}{
		{
			name: "every method", first: "/v1/user", second: "/v1/user/",
			want: DuplicateError[spec]{Pattern: "/v1/user", Existing: "/v1/user", Value: "/v1/user"},
		},
		{
			name: "a method", first: "/x/{a} GET,POST", second: "/x/{b} PUT,POST",
			want: DuplicateError[spec]{Pattern: "/x/{b}", Method: "POST", Existing: "/x/{a}", Value: "/x/{a} GET,POST"},
		},
		{
			name: "case-insensitive", caseInsensitive: true, first: "/V1", second: "/v1",
			want: DuplicateError[spec]{Pattern: "/v1", Existing: "/V1", Value: "/V1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, Options{CaseInsensitive: tt.caseInsensitive}, tt.first)
			pattern, methods := tt.second.parts()
			err := tr.Insert(pattern, methods, tt.second)
			var dup *DuplicateError[spec]
			if !errors.As(err, &dup) {
				t.Fatalf("Insert(%q, %q): got %v, want a *DuplicateError", pattern, methods, err)
			}
			if *dup != tt.want {
				t.Errorf("Insert(%q, %q): got %+v, want %+v", pattern, methods, *dup, tt.want)
			}
		})
	}
}

func TestParseMethod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "GET", want: "GET"},
		{in: "get", want: "GET"},
		{in: "PROPFIND", want: "PROPFIND"},
		{in: "M-SEARCH", want: "M-SEARCH"},
		{in: "", wantErr: `method "" is not a valid HTTP method; use a name like GET or POST`},
		{in: "GE T", wantErr: `method "GE T" is not a valid HTTP method; write several methods as a list like [GET, POST]`},
		{in: "GET,POST", wantErr: `method "GET,POST" is not a valid HTTP method; write several methods as a list like [GET, POST]`},
		{in: "G/T", wantErr: `method "G/T" is not a valid HTTP method; use a name like GET or POST`},
		// strings.ToUpper would make it "S".
		{in: "ſ", wantErr: `method "ſ" is not a valid HTTP method; use a name like GET or POST`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMethod(tt.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("ParseMethod(%q): got %q, %q; want %q, %q", tt.in, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}
