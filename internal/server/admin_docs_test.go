package server

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocAdminTokenEndpoints checks the documentation of --admin-token
// against the admin port: the endpoints of the table in docs/operations.md
// ("Admin port") that a gateway without a token refuses as disabled are
// exactly those docs/cli.md says --admin-token guards.
func TestDocAdminTokenEndpoints(t *testing.T) {
	t.Parallel()
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var tokenRow string
	for line := range strings.SplitSeq(string(cli), "\n") {
		if strings.HasPrefix(line, "| `--admin-token` |") {
			tokenRow = line
		}
	}
	if tokenRow == "" {
		t.Fatal("docs/cli.md has no row for --admin-token")
	}

	g := newGW(t, basicRules)
	admin := NewAdmin(AdminConfig{
		Rules: g.reloader(nil),
		Usage: &UsageConfig{Store: g.store, Resetter: g.store, Now: g.clock.Now, Logger: slog.New(slog.DiscardHandler)},
	})
	endpoint := regexp.MustCompile("(?m)^\\| `(GET|POST) (/[a-z/]*)")
	rows := endpoint.FindAllStringSubmatch(string(ops), -1)
	if len(rows) < 5 {
		t.Fatalf("found %d endpoints in docs/operations.md: is the table still there?", len(rows))
	}
	guarded := 0
	for _, m := range rows {
		name := m[1] + " " + m[2]
		w := httptest.NewRecorder()
		admin.ServeHTTP(w, httptest.NewRequest(m[1], m[2], nil))
		disabled := w.Code == 403 && strings.Contains(w.Body.String(), "--admin-token")
		documented := strings.Contains(tokenRow, "`"+name+"`")
		if disabled {
			guarded++
		}
		if disabled != documented {
			t.Errorf("%s: refused as disabled without a token: %v; docs/cli.md's --admin-token row names it: %v", name, disabled, documented)
		}
	}
	if guarded == 0 {
		t.Error("no endpoint of docs/operations.md is refused without a token")
	}
}
