package main

import (
	"strings"
	"testing"
)

// TestCommandLine runs `rls --from-env` when the binary is named
// ratelimit, as Envoy Gateway and envoyproxy/ratelimit's charts run
// /bin/ratelimit, and takes the arguments as they are otherwise.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"/bin/ratelimit"}, "rls --from-env"},
		{[]string{"ratelimit", "--log-level", "debug"}, "rls --from-env --log-level debug"},
		{[]string{"/usr/local/bin/gateway", "rls", "--config", "x"}, "rls --config x"},
		{[]string{"/opt/ratelimit-gateway"}, ""},
		{nil, ""},
	} {
		if got := strings.Join(commandLine(tc.argv), " "); got != tc.want {
			t.Errorf("commandLine(%q): got %q, want %q", tc.argv, got, tc.want)
		}
	}
}
