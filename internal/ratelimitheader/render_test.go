package ratelimitheader

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "app-1/v1/user GET", want: `"app-1/v1/user GET"`},
		{name: "quote and backslash", in: `a"b\c`, want: `"a\"b\\c"`},
		{name: "control", in: "a\x01b\x7f", want: `"a?b?"`},
		// Each byte of a character a string cannot hold is a "?": the
		// name keeps its length and does not read as "/caf", another
		// limit's name.
		{name: "non-ASCII", in: "/café", want: `"/caf??"`},
		{name: "empty", in: "", want: `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quote(tt.in); got != tt.want {
				t.Errorf("Quote(%q): got %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	name := Quote("rl")
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{name: "policy", got: AppendPolicy(nil, name, 10, time.Minute), want: `"rl";q=10;w=60`},
		{name: "policy of a part second", got: AppendPolicy(nil, name, 1, 1500*time.Millisecond), want: `"rl";q=1;w=2`},
		{name: "policy after another", got: AppendPolicy([]byte(`"a";q=1;w=1, `), name, 2, time.Second), want: `"a";q=1;w=1, "rl";q=2;w=1`},
		{name: "state", got: AppendState(nil, name, 3, 1100*time.Millisecond, false), want: `"rl";r=3;t=2`},
		{name: "state over the limit", got: AppendState(nil, name, -4, 0, false), want: `"rl";r=0;t=0`},
		{name: "state blocked", got: AppendState(nil, name, 0, time.Hour, true), want: `"rl";r=0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

func TestMoreConstraining(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b limit.Result
		want bool
	}{
		{name: "denied first", a: limit.Result{Remaining: 5}, b: limit.Result{Allowed: true, Remaining: 0}, want: true},
		{name: "admitted after denied", a: limit.Result{Allowed: true}, b: limit.Result{Remaining: 5}, want: false},
		{name: "fewer remaining", a: limit.Result{Allowed: true, Remaining: 1}, b: limit.Result{Allowed: true, Remaining: 2}, want: true},
		{name: "longer wait", a: limit.Result{Allowed: true, Reset: 2 * time.Second}, b: limit.Result{Allowed: true, Reset: time.Second}, want: true},
		{name: "equal", a: limit.Result{Allowed: true}, b: limit.Result{Allowed: true}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MoreConstraining(tt.a, tt.b); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestModeFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in            string
		want          Mode
		draft, legacy bool
	}{
		{"both", Both, true, true}, {"draft", Draft, true, false}, {"legacy", Legacy, false, true}, {"none", None, false, false},
	}
	for _, tt := range tests {
		var m Mode
		if err := m.Set(tt.in); err != nil || m != tt.want || m.String() != tt.in {
			t.Errorf("Set(%q): got %v (%v), want %v", tt.in, m, err, tt.want)
		}
		if m.Draft() != tt.draft || m.Legacy() != tt.legacy {
			t.Errorf("%s: draft %v legacy %v, want %v %v", m, m.Draft(), m.Legacy(), tt.draft, tt.legacy)
		}
	}
	var m Mode
	if err := m.Set("all"); err == nil {
		t.Error(`Set("all"): got no error`)
	}
}
