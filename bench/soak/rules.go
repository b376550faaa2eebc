package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// The two valid rule files the soak alternates between. Both configure the
// apps the traffic uses, with limits that keep each class's expected
// statuses the same; they differ in what a reload must handle: a limit
// change that keeps counts ("*" on /), an algorithm change that starts
// fresh counters (soak-limited), and a rule that comes and goes (soak-ok's
// /v1/order and "*"'s /v1/search, whose keys are forgotten when it goes).
const (
	rulesA = `# soak rules, variant A
configs:
  - appId: soak-ok
    limit: 1000000000
    unit: 1s
    limits:
      - api: /v1/user
        limit: 1000000000
        unit: 1s
  - appId: soak-limited
    limits:
      - api: /v1/user
        limit: 20
        unit: 1s
  - appId: "*"
    by: ip
    limits:
      - api: /
        limit: 5
        unit: 10s
`
	rulesB = `# soak rules, variant B
configs:
  - appId: soak-ok
    limit: 1000000000
    unit: 1s
    limits:
      - api: /v1/user
        limit: 1000000000
        unit: 1s
      - api: /v1/order
        limit: 1000000000
        unit: 1s
  - appId: soak-limited
    limits:
      - api: /v1/user
        algorithm: fixed_window
        limit: 30
        unit: 1s
  - appId: "*"
    by: ip
    limits:
      - api: /
        limit: 8
        unit: 10s
      - api: /v1/search
        limit: 3
        unit: 10s
`
)

// invalidRules are the bad edits, one kind after another: each must be
// rejected and leave the rules in force.
var invalidRules = []struct{ kind, data string }{
	{"syntax", "configs:\n  - appId: soak-ok\n    limits: [\n"},
	{"validation", "configs:\n  - appId: soak-ok\n    limits:\n      - api: /v1/user\n        limit: -5\n"},
	{"empty", ""},
	{"duplicate app", "configs:\n  - appId: soak-ok\n    limits:\n      - api: /\n        limit: 1\n  - appId: soak-ok\n    limits:\n      - api: /\n        limit: 2\n"},
}

// checkFixtures makes sure the soak's own rule files are what it says:
// the variants valid, the bad edits invalid, so that a reload result the
// soak did not expect is the gateway's doing.
func checkFixtures() error {
	for _, v := range []string{rulesA, rulesB} {
		if _, err := config.Parse("soak.yaml", []byte(v)); err != nil {
			return fmt.Errorf("a soak rule variant is invalid: %w", err)
		}
	}
	for _, v := range invalidRules {
		if _, err := config.Parse("soak.yaml", []byte(v.data)); err == nil {
			return fmt.Errorf("the %s edit is valid; it should not be", v.kind)
		}
	}
	return nil
}

func sha(data string) string {
	s := sha256.Sum256([]byte(data))
	return hex.EncodeToString(s[:])
}

// reloadStats are the rule rewrites and what the gateway made of them.
type reloadStats struct {
	mu         sync.Mutex
	valid      int
	invalid    map[string]int
	renames    int
	inPlace    int
	mismatches []string // a write the gateway did not take as it should
}

// rewriter rewrites the rule file: valid variants alternating, and every
// fifth write a bad edit. Each write is either a rename over the file (how
// editors save) or a write in place, alternately. After each, it waits
// for /rules to show the new rules in force, or the bad edit rejected with
// the rules unchanged.
type rewriter struct {
	path    string
	admin   string
	client  *http.Client
	timeout time.Duration
	inForce string // the content in force
	writes  int
	stats   *reloadStats
}

// rulesView is the part of GET /rules the soak reads.
type rulesView struct {
	SHA256      string     `json:"sha256"`
	LastError   string     `json:"lastError"`
	LastErrorAt *time.Time `json:"lastErrorAt"`
}

func (rw *rewriter) view() (rulesView, error) {
	var v rulesView
	resp, err := rw.client.Get(rw.admin + "/rules")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /rules: status %d", resp.StatusCode)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// step makes the next write and checks its outcome.
func (rw *rewriter) step() {
	k := rw.writes
	rw.writes++
	next, kind := rulesA, ""
	if rw.inForce == rulesA {
		next = rulesB
	}
	if k%5 == 4 {
		bad := invalidRules[(k/5)%len(invalidRules)]
		next, kind = bad.data, bad.kind
	}
	before, err := rw.view()
	if err != nil {
		rw.mismatch("write %d: reading /rules before: %v", k, err)
		return
	}
	rename := k%2 == 0
	if err := rw.write(next, rename); err != nil {
		rw.mismatch("write %d: %v", k, err)
		return
	}
	rw.stats.mu.Lock()
	if rename {
		rw.stats.renames++
	} else {
		rw.stats.inPlace++
	}
	if kind == "" {
		rw.stats.valid++
	} else {
		rw.stats.invalid[kind]++
	}
	rw.stats.mu.Unlock()

	want := sha(rw.inForce)
	done := func(v rulesView) bool {
		return v.SHA256 == want && v.LastError != "" && v.LastErrorAt != nil &&
			(before.LastErrorAt == nil || !v.LastErrorAt.Equal(*before.LastErrorAt))
	}
	if kind == "" {
		want = sha(next)
		done = func(v rulesView) bool { return v.SHA256 == want && v.LastError == "" }
	}
	deadline := time.Now().Add(rw.timeout)
	for {
		v, err := rw.view()
		if err == nil && done(v) {
			break
		}
		if time.Now().After(deadline) {
			what := "the new rules in force"
			if kind != "" {
				what = "the " + kind + " edit rejected with the rules unchanged"
			}
			rw.mismatch("write %d: %s not seen within %s (last /rules: sha256 %.12s…, lastError %q, err %v)",
				k, what, rw.timeout, v.SHA256, v.LastError, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if kind == "" {
		rw.inForce = next
	}
}

// write replaces the rule file with data: by a rename of a new file over
// it, or in place.
func (rw *rewriter) write(data string, rename bool) error {
	if !rename {
		return os.WriteFile(rw.path, []byte(data), 0o644)
	}
	tmp := filepath.Join(filepath.Dir(rw.path), ".soak-rules.tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, rw.path)
}

func (rw *rewriter) mismatch(format string, args ...any) {
	rw.stats.mu.Lock()
	defer rw.stats.mu.Unlock()
	rw.stats.mismatches = append(rw.stats.mismatches, fmt.Sprintf(format, args...))
}
