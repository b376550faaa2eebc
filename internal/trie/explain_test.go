package trie

import (
	"fmt"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rules  []spec
		method string
		path   string
		want   []string // "* pattern [methods]: reason", "*" marking the chosen one
	}{
		{
			name:   "literal beats variable",
			rules:  []spec{"/v1", "/v1/{id}/orders", "/v1/user/orders", "/v2"},
			method: "GET",
			path:   "/v1/user/orders",
			want: []string{
				`* /v1/user/orders []: matches 3 of 3 segments; beats "/v1/{id}/orders": literal "user" beats {id} at segment 2`,
				`  /v1/{id}/orders []: matches 3 of 3 segments; "/v1/user/orders" wins: literal "user" beats {id} at segment 2`,
				`  /v1 []: matches 1 of 3 segments; "/v1/user/orders" wins: 3 matching segments beat 1`,
			},
		},
		{
			name:   "methods",
			rules:  []spec{"/v1/user", "/v1/user GET", "/v1/user/{id} POST", "/v1/user PUT,DELETE"},
			method: "GET",
			path:   "/v1/user/42",
			want: []string{
				`  /v1/user/{id} [POST]: method GET not in [POST]`,
				`* /v1/user [GET]: matches 2 of 3 segments; beats "/v1/user": a rule listing GET beats a rule for every method`,
				`  /v1/user []: matches 2 of 3 segments; "/v1/user" wins: a rule listing GET beats a rule for every method`,
				`  /v1/user [PUT DELETE]: method GET not in [PUT DELETE]`,
			},
		},
		{
			name:   "only rule",
			rules:  []spec{"/", "/v2"},
			method: "GET",
			path:   "/v1/user/",
			want: []string{
				`* / []: matches 0 of 2 segments; the only rule that applies`,
			},
		},
		{
			name:   "no rule applies",
			rules:  []spec{"/v1 POST", "/v1/username"},
			method: "GET",
			path:   "/v1/user",
			want: []string{
				`  /v1 [POST]: method GET not in [POST]`,
			},
		},
		{
			name:   "no rule matches",
			rules:  []spec{"/v1/username"},
			method: "GET",
			path:   "/v1/user",
			want:   nil,
		},
		{
			name:   "backtracking",
			rules:  []spec{"/a/b/c", "/a/{x}/d", "/a"},
			method: "GET",
			path:   "/a/b/d",
			want: []string{
				`* /a/{x}/d []: matches 3 of 3 segments; beats "/a": 3 matching segments beat 1`,
				`  /a []: matches 1 of 3 segments; "/a/{x}/d" wins: 3 matching segments beat 1`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, Options{}, tt.rules...)
			var got []string
			for _, c := range tr.Explain(tt.method, tt.path) {
				mark := " "
				if c.Chosen {
					mark = "*"
				}
				got = append(got, fmt.Sprintf("%s %s [%s]: %s", mark, c.Pattern, strings.Join(c.Methods, " "), c.Reason))
				if want := spec(strings.TrimSpace(c.Pattern + " " + strings.Join(c.Methods, ","))); c.Value != want {
					t.Errorf("Explain(%q, %q): candidate %s has value %q, want %q", tt.method, tt.path, c.Pattern, c.Value, want)
				}
			}
			if g, w := strings.Join(got, "\n"), strings.Join(tt.want, "\n"); g != w {
				t.Errorf("Explain(%q, %q):\ngot\n%s\nwant\n%s", tt.method, tt.path, g, w)
			}
		})
	}
}
