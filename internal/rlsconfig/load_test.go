package rlsconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

const upstream = "testdata/envoyproxy/"

// TestUpstreamFilesLoad loads envoyproxy/ratelimit's own good example and
// test configurations unchanged.
func TestUpstreamFilesLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		path    string
		domains int
		limits  int
	}{
		{"basic", upstream + "basic_config.yaml", 1, 10},
		{"shadow mode", upstream + "shadowmode_config.yaml", 1, 4},
		{"wildcard", upstream + "wildcard.yaml", 1, 5},
		{"share threshold", upstream + "share_threshold.yaml", 1, 9},
		{"merge part 1", upstream + "merge_domain_key1.yaml", 1, 1},
		{"examples directory", upstream + "examples", 2, 17},
		{"integration directory", upstream + "integration", 4, 14},
		{"integration basic", upstream + "integration/basic.yaml", 1, 3},
		{"integration another", upstream + "integration/another.yaml", 1, 6},
		{"integration share threshold", upstream + "integration/share_threshold.yaml", 1, 2},
		{"integration reload", upstream + "integration/reload.yaml", 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(tc.path, Options{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(c.Domains) != tc.domains || c.Limits() != tc.limits {
				t.Errorf("got %d domains and %d limits, want %d and %d", len(c.Domains), c.Limits(), tc.domains, tc.limits)
			}
		})
	}
}

// TestQuotaMode reads quota_mode, envoyproxy/ratelimit's newest
// descriptor key, onto the descriptor it is set on.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	c, err := Parse("q.yaml", []byte("domain: d\ndescriptors:\n  - key: quota\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want bool
	}{{"quota", true}, {"plain", false}} {
		m, ok := c.Domains["d"].Find([]Entry{{Key: tc.key, Value: "x"}})
		if !ok {
			t.Fatalf("%s: no match", tc.key)
		}
		if m.Descriptor.QuotaMode != tc.want {
			t.Errorf("%s: QuotaMode got %v, want %v", tc.key, m.Descriptor.QuotaMode, tc.want)
		}
	}
	if _, err := Parse("q.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    quota_mode: maybe\n"), Options{}); err == nil || !strings.Contains(err.Error(), `q.yaml:4: quota_mode "maybe" is not true or false`) {
		t.Errorf("a bad quota_mode: got %v, want an error on line 4", err)
	}
}

// TestUpstreamBadFiles refuses envoyproxy/ratelimit's bad test files with an
// error on the offending line that names the problem.
func TestUpstreamBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		line int
		want string
	}{
		{"bad_limit_unit.yaml", 6, `invalid rate limit unit "foo"`},
		{"bad_yaml.yaml", 2, "not valid YAML"},
		{"duplicate_key.yaml", 6, `duplicate descriptor composite key "key1_value1"`},
		{"empty_domain.yaml", 1, "empty domain"},
		{"empty_key.yaml", 3, "empty key"},
		{"misspelled_key.yaml", 5, `unknown key "ratelimit"`},
		{"misspelled_key2.yaml", 7, `unknown key "requestsperunit"`},
		{"non_map_list.yaml", 3, "descriptors contain a scalar"},
		{"non_string_key.yaml", 1, "key is not a string: 0.25"},
		{"replaces_empty.yaml", 10, "empty replaces entry"},
		{"replaces_self.yaml", 10, "name of its own limit"},
		{"unlimited_with_unit.yaml", 6, "should not specify rate limit unit when unlimited"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			_, err := Load(upstream+tc.file, Options{})
			var errs config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want config.Errors", err)
			}
			e := errs[0]
			if e.File != upstream+tc.file || e.Line != tc.line || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("got %v, want %s:%d: …%s…", e, upstream+tc.file, tc.line, tc.want)
			}
		})
	}
}

// TestDuplicateDomain loads a directory whose files declare one domain
// twice: an error naming both files, unless MergeDomains.
func TestDuplicateDomain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		copyFile(t, upstream+f, filepath.Join(dir, f))
	}
	_, err := Load(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), `merge_domain_key2.yaml:2: duplicate domain "test-domain": it is also declared in`) {
		t.Errorf("got %v, want a duplicate domain error on line 2 of the second file", err)
	}
	c, err := Load(dir, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Limits(); got != 2 {
		t.Errorf("merged: got %d limits, want 2", got)
	}
}

// TestDirectoryConfigMap reads a directory laid out as a Kubernetes
// ConfigMap volume: symlinks into ..data, which the loader must not read
// twice, a file without an extension, and a dot file it skips.
func TestDirectoryConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_26_01_00_00.1")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, upstream+"examples/config.yaml", filepath.Join(ts, "config.yaml"))
	copyFile(t, upstream+"examples/example.yaml", filepath.Join(ts, "example.yaml"))
	writeFile(t, filepath.Join(ts, "third"), "domain: third\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, ".notes"), "not a config")
	writeFile(t, filepath.Join(dir, "config.yaml~"), "an editor's backup")
	mustSymlink(t, filepath.Base(ts), filepath.Join(dir, "..data"))
	for _, f := range []string{"config.yaml", "example.yaml", "third"} {
		mustSymlink(t, filepath.Join("..data", f), filepath.Join(dir, f))
	}
	c, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 3 || len(c.Domains) != 3 {
		t.Errorf("got files %v and %d domains, want 3 of each", c.Files, len(c.Domains))
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string // "line: text"
	}{
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: magic\n",
			[]string{`7: rate_limit of k: unknown algorithm "magic"`}},
		{"precision on fixed window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: fixed_window\n      precision: 4\n",
			[]string{"8: rate_limit of k: precision applies only to sliding_window"}},
		{"limit too large", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4000000000\n",
			[]string{"6: requests_per_unit 4000000000 is above"}},
		{"negative limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
			[]string{`6: requests_per_unit "-1" is not a whole number`}},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
			[]string{`5: invalid rate limit unit ""`}},
		{"calendar hour", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n      calendar: true\n",
			[]string{"7: calendar applies to the units day, week and month"}},
		{"bad zone", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      calendar: true\n      timezone: Mars/Olympus\n",
			[]string{`8: rate_limit of k: unknown time zone "Mars/Olympus"`}},
		{"share threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			[]string{"5: share_threshold can only be used with wildcard values"}},
		{"every problem", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n  - key: b\n    shadow_mode: maybe\n",
			[]string{`4: invalid rate limit unit "fortnight"`, `6: shadow_mode "maybe" is not true or false`}},
		{"two documents", "domain: a\n---\ndomain: b\n", []string{"2: a second YAML document"}},
		{"empty", "", []string{"0: the file is empty"}},
		{"key twice", "domain: a\ndomain: b\n", []string{"2: domain is set twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("x.yaml", []byte(tc.yaml), Options{})
			var errs config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want config.Errors", err)
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors (%v), want %d", len(errs), err, len(tc.want))
			}
			for i, w := range tc.want {
				line, text, _ := strings.Cut(w, ": ")
				if got := errs[i]; strconv.Itoa(got.Line) != line || !strings.Contains(got.Msg, text) {
					t.Errorf("error %d: got %v, want line %s with %q", i, got, line, text)
				}
			}
		})
	}
}

// TestAnchors reads YAML anchors, aliases and merge keys, which
// envoyproxy/ratelimit's YAML reader accepts.
func TestAnchors(t *testing.T) {
	t.Parallel()
	c, err := Parse("x.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: &per_minute {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: *per_minute
  - key: c
    rate_limit:
      <<: *per_minute
      requests_per_unit: 20
  - &shared
    key: d
    rate_limit: *per_minute
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int64{"a": 10, "b": 10, "c": 20, "d": 10} {
		m, ok := c.Domains["d"].Find([]Entry{{key, "x"}})
		if !ok || m.Descriptor.Limit.Params.Limit != want || m.Descriptor.Limit.Params.Window != time.Minute {
			t.Errorf("%s: got %+v, want %d a minute", key, m.Descriptor, want)
		}
	}
}

func TestExtensions(t *testing.T) {
	t.Parallel()
	c, err := Parse("x.yaml", []byte(`domain: d
descriptors:
  - key: default
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: theirs
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}
  - key: locked
    rate_limit: {unit: minute, requests_per_unit: 3, lock_seconds: 600}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 1000, calendar: true, timezone: Europe/Berlin}
  - key: open
    rate_limit: {unlimited: true}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want limit.Params
	}{
		{"default", limit.Params{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: limit.DefaultPrecision}},
		{"theirs", limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}},
		{"bucket", limit.Params{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 20}},
		{"locked", limit.Params{Algorithm: "sliding_window", Limit: 3, Window: time.Minute, Precision: limit.DefaultPrecision, Lock: 10 * time.Minute}},
		{"monthly", limit.Params{Algorithm: "fixed_window", Limit: 1000, Window: 30 * 24 * time.Hour, Calendar: limit.CalendarMonth, Zone: "Europe/Berlin"}},
		{"open", limit.Params{}},
	} {
		m, ok := c.Domains["d"].Find([]Entry{{tc.key, "x"}})
		if !ok {
			t.Errorf("%s: no limit found", tc.key)
			continue
		}
		if got := m.Descriptor.Limit.Params; got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.key, got, tc.want)
		}
	}
	if m, _ := c.Domains["d"].Find([]Entry{{"open", "x"}}); !m.Descriptor.Limit.Unlimited {
		t.Errorf("open: not unlimited")
	}
	if m, _ := c.Domains["d"].Find([]Entry{{"monthly", "x"}}); m.Descriptor.Limit.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH {
		t.Errorf("monthly: unit %v, want MONTH", m.Descriptor.Limit.Unit)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(data))
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestAliasAttacks refuses configs whose YAML aliases would make the
// loader recurse without end or expand without bound.
func TestAliasAttacks(t *testing.T) {
	t.Parallel()
	var bomb strings.Builder
	bomb.WriteString("domain: d\ndescriptors:\n  - key: k0\n    descriptors: &l0\n")
	for i := range 10 {
		fmt.Fprintf(&bomb, "      - key: v%d\n", i)
	}
	for lvl := 1; lvl < 9; lvl++ {
		fmt.Fprintf(&bomb, "  - key: k%d\n    descriptors: &l%d\n", lvl, lvl)
		for i := range 10 {
			fmt.Fprintf(&bomb, "      - key: v%d\n        descriptors: *l%d\n", i, lvl-1)
		}
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"self merge", "domain: d\ndescriptors:\n  - &x\n    key: a\n    <<: *x\n", "a mapping that merges itself"},
		{"self list", "domain: d\ndescriptors: &d\n  - key: a\n    descriptors: *d\n", "contains itself"},
		{"fan-out", bomb.String(), "more than 100000 descriptors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
