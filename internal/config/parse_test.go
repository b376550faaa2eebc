package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// src drops the newline that starts a raw-string rule file in a test, so
// that its first line is line 1.
func src(s string) []byte {
	return []byte(strings.TrimPrefix(s, "\n"))
}

// mustParse parses a rule file that must be valid.
func mustParse(t *testing.T, name string, data []byte) *Rules {
	t.Helper()
	r, err := Parse(name, data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return r
}

// sw returns sliding_window Params.
func sw(n int64, window time.Duration, precision int) limit.Params {
	return limit.Params{Algorithm: "sliding_window", Limit: n, Window: window, Precision: precision}
}

// wantRules are the rules of testdata/rules.yaml and testdata/rules.json
// (whose lines differ).
func wantRules(path string, yamlLines bool) *Rules {
	line := func(yamlLine, jsonLine int) int {
		if yamlLines {
			return yamlLine
		}
		return jsonLine
	}
	total := sw(1000, time.Minute, 60)
	return &Rules{
		Path:            path,
		CaseInsensitive: true,
		Apps: []App{
			{
				ID: "app-1", By: ByApp, Total: &total, Line: line(8, 5),
				Limits: []Rule{
					{API: "/v1/user", Params: sw(100, time.Minute, 20), Line: line(13, 11)},
					{API: "/v1/user/{id}/orders", Methods: []string{"GET", "POST"}, Params: sw(10, 500*time.Millisecond, 20), Line: line(16, 12)},
					{API: "/v1/user/{uid}/orders", Methods: []string{"DELETE"}, Params: sw(1, time.Second, 5), Line: line(20, 13)},
					{API: "/v1/health", Params: sw(-1, time.Second, 20), Line: line(24, 14)},
					{API: "/v1/beta", Params: sw(0, time.Second, 20), Shadow: true, Line: line(26, 15)},
				},
			},
			{
				ID: "app-2", By: ByGlobal, Line: line(29, 18),
				Limits: []Rule{{API: "/v1/user", Params: sw(50, time.Second, 20), Line: line(32, 18)}},
			},
			{ID: "trusted", By: ByApp, Line: line(34, 19)},
			{
				ID: "*", By: ByIP, Line: line(36, 20),
				Limits: []Rule{{API: "/", Params: sw(20, time.Second, 20), Line: line(38, 20)}},
			},
		},
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		path      string
		yamlLines bool
	}{
		{name: "yaml", path: "testdata/rules.yaml", yamlLines: true},
		{name: "json", path: "testdata/rules.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Load(tt.path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			data, err := os.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if want := hex.EncodeToString(sum[:]); got.SHA256 != want {
				t.Errorf("SHA256: got %s, want %s", got.SHA256, want)
			}
			want := wantRules(tt.path, tt.yamlLines)
			want.SHA256 = got.SHA256
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%s):\ngot  %+v\nwant %+v", tt.path, got, want)
			}
		})
	}
}

// TestYAMLAndJSONAgree checks that the two formats of the same rules give
// the same Rules but for lines, path and hash.
func TestYAMLAndJSONAgree(t *testing.T) {
	t.Parallel()
	y, err := Load("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := Load("testdata/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Rules{y, j} {
		r.Path, r.SHA256 = "", ""
		for i := range r.Apps {
			r.Apps[i].Line = 0
			for k := range r.Apps[i].Limits {
				r.Apps[i].Limits[k].Line = 0
			}
		}
	}
	if !reflect.DeepEqual(y, j) {
		t.Errorf("YAML and JSON differ:\nyaml %+v\njson %+v", y, j)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load of a missing file: got no error")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: got %v, want an error wrapping fs.ErrNotExist", err)
	}
	if want := "reading rules " + path + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load of a missing file: got %q, want it to start with %q", err, want)
	}
}

func TestSHA256(t *testing.T) {
	t.Parallel()
	data := src(`
configs:
  - appId: a
    limits: [{api: /, limit: 1}]
`)
	r := mustParse(t, "rules.yaml", data)
	sum := sha256.Sum256(data)
	if got, want := r.SHA256, hex.EncodeToString(sum[:]); got != want {
		t.Errorf("SHA256: got %s, want %s", got, want)
	}
	if got, want := len(r.SHA256), 64; got != want {
		t.Errorf("len(SHA256): got %d, want %d", got, want)
	}
	// A comment changes the hash, not the rules.
	r2 := mustParse(t, "rules.yaml", append([]byte("# comment\n"), data...))
	if r2.SHA256 == r.SHA256 {
		t.Errorf("SHA256 of different bytes: got the same %s", r.SHA256)
	}
	if got, want := r2.Path, "rules.yaml"; got != want {
		t.Errorf("Path: got %q, want %q", got, want)
	}
}

func TestExtensions(t *testing.T) {
	t.Parallel()
	const y = "configs: [{appId: a, limits: [{api: /, limit: 1}]}]\n"
	const j = `{"configs": [{"appId": "a", "limits": [{"api": "/", "limit": 1}]}]}`
	tests := []struct {
		name string
		path string
		data string
		err  string // a part of the error, "" when valid
	}{
		{name: "yaml", path: "r.yaml", data: y},
		{name: "yml", path: "dir.d/r.yml", data: y},
		{name: "upper case", path: "R.YAML", data: y},
		{name: "json", path: "r.json", data: j},
		{name: "json is yaml but not read as yaml", path: "r.json", data: y, err: "r.json:1: the file is not valid JSON"},
		{name: "json with a byte order mark", path: "r.json", data: "\xef\xbb\xbf" + j},
		{name: "yaml with a byte order mark", path: "r.yaml", data: "\xef\xbb\xbf" + y},
		{name: "yaml with document markers", path: "r.yaml", data: "---\n" + y + "...\n"},
		{name: "yaml with an empty trailing document", path: "r.yaml", data: y + "---\n"},
		{name: "txt", path: "r.txt", data: y, err: `r.txt: the rule file extension ".txt" is not supported; name it *.yaml, *.yml, *.json or *.xml`},
		{name: "toml", path: "r.toml", data: y, err: `extension ".toml" is not supported`},
		{name: "none", path: "rules", data: y, err: "rules: the rule file name has no extension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Parse(tt.path, []byte(tt.data))
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Parse(%s): %v", tt.path, err)
				}
				if got, want := len(r.Apps), 1; got != want {
					t.Errorf("apps: got %d, want %d", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%s): got %v, want an error containing %q", tt.path, err, tt.err)
			}
			if r != nil {
				t.Errorf("Parse(%s) with an error: got rules %+v, want nil", tt.path, r)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		data  string
		total *limit.Params
		rule  limit.Params
	}{
		{
			name: "built in",
			data: `
configs:
  - appId: a
    limit: 7
    limits: [{api: /, limit: 5}]
`,
			total: &limit.Params{Algorithm: limit.DefaultAlgorithm, Limit: 7, Window: DefaultUnit, Precision: limit.DefaultPrecision},
			rule:  limit.Params{Algorithm: limit.DefaultAlgorithm, Limit: 5, Window: DefaultUnit, Precision: limit.DefaultPrecision},
		},
		{
			name: "from defaults",
			data: `
defaults: {unit: 2m, precision: 30}
configs:
  - appId: a
    limit: 7
    limits: [{api: /, limit: 5}]
`,
			total: &limit.Params{Algorithm: "sliding_window", Limit: 7, Window: 2 * time.Minute, Precision: 30},
			rule:  limit.Params{Algorithm: "sliding_window", Limit: 5, Window: 2 * time.Minute, Precision: 30},
		},
		{
			name: "rule and app override defaults separately",
			data: `
defaults: {unit: 2m, precision: 30}
configs:
  - appId: a
    limit: 7
    unit: 1h
    limits: [{api: /, limit: 5, precision: 3}]
`,
			total: &limit.Params{Algorithm: "sliding_window", Limit: 7, Window: time.Hour, Precision: 30},
			rule:  limit.Params{Algorithm: "sliding_window", Limit: 5, Window: 2 * time.Minute, Precision: 3},
		},
		{
			name: "app total of -1 is no total",
			data: `
configs:
  - appId: a
    limit: -1
    limits: [{api: /, limit: 5}]
`,
			rule: sw(5, time.Second, limit.DefaultPrecision),
		},
		{
			name: "app total of 0 blocks",
			data: `
configs:
  - appId: a
    limit: 0
    limits: [{api: /, limit: 5}]
`,
			total: &limit.Params{Algorithm: "sliding_window", Limit: 0, Window: time.Second, Precision: limit.DefaultPrecision},
			rule:  sw(5, time.Second, limit.DefaultPrecision),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, "rules.yaml", src(tt.data))
			app := r.Apps[0]
			switch {
			case tt.total == nil && app.Total != nil:
				t.Errorf("total: got %+v, want nil", *app.Total)
			case tt.total != nil && app.Total == nil:
				t.Errorf("total: got nil, want %+v", *tt.total)
			case tt.total != nil && *app.Total != *tt.total:
				t.Errorf("total: got %+v, want %+v", *app.Total, *tt.total)
			}
			if got := app.Limits[0].Params; got != tt.rule {
				t.Errorf("rule: got %+v, want %+v", got, tt.rule)
			}
		})
	}
}

func TestBy(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", src(`
configs:
  - {appId: a, limit: 1}
  - {appId: "*", limit: 1}
  - {appId: b, by: ip, limit: 1}
  - {appId: c, by: global, limit: 1}
  - {appId: d, by: app, limit: 1}
  - {appId: e, by: header:x-user-id, limit: 1}
  - {appId: f, by: [ip, "header:x-user-id", query:user], limit: 1}
  - {appId: g, by: "ip, query:user", limit: 1}
  - {appId: h, by: [claim:sub, header:x-user-id], limit: 1}
`))
	want := []By{ByApp, ByIP, ByIP, ByGlobal, ByApp, "header:X-User-Id", "ip,header:X-User-Id,query:user", "ip,query:user", "claim:sub,header:X-User-Id"}
	for i, app := range r.Apps {
		if app.By != want[i] {
			t.Errorf("app %s: by: got %q, want %q", app.ID, app.By, want[i])
		}
	}
	if got, want := By("ip,header:X-User-Id,query:user").Parts(), []KeyPart{{Kind: KeyIP}, {Kind: KeyHeader, Name: "X-User-Id"}, {Kind: KeyQuery, Name: "user"}}; !slices.Equal(got, want) {
		t.Errorf("Parts: got %v, want %v", got, want)
	}
	if got, want := By("claim:sub").Parts(), []KeyPart{{Kind: KeyClaim, Name: "sub"}}; !slices.Equal(got, want) || !By("ip,claim:sub").Claims() || By("ip,header:sub").Claims() {
		t.Errorf("Parts of claim:sub: got %v, want %v, and Claims true only with a claim", got, want)
	}
}

// TestByInheritance checks where a limit's by and missing come from: the
// rule, else its app, else (for configured apps) defaults.
func TestByInheritance(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", src(`
defaults:
  by: header:X-User-Id
  missing: deny
configs:
  - appId: a
    limit: 10
    limits:
      - {api: /x, limit: 1}
      - {api: /y, limit: 1, by: query:user, missing: share}
  - appId: b
    by: app
    missing: ip
    limits:
      - {api: /x, limit: 1}
  - appId: "*"
    limits:
      - {api: /x, limit: 1}
`))
	tests := []struct {
		name        string
		by          By
		missing     Missing
		wantBy      By
		wantMissing Missing
	}{
		{"a", r.Apps[0].By, r.Apps[0].Missing, "header:X-User-Id", MissingDeny},
		{"a /x", r.Apps[0].Limits[0].By, r.Apps[0].Limits[0].Missing, "", ""},
		{"a /y", r.Apps[0].Limits[1].By, r.Apps[0].Limits[1].Missing, "query:user", MissingShare},
		{"b", r.Apps[1].By, r.Apps[1].Missing, ByApp, MissingIP},
		{"*", r.Apps[2].By, r.Apps[2].Missing, ByIP, MissingDeny},
	}
	for _, tt := range tests {
		if tt.by != tt.wantBy || tt.missing != tt.wantMissing {
			t.Errorf("%s: got by %q missing %q, want by %q missing %q", tt.name, tt.by, tt.missing, tt.wantBy, tt.wantMissing)
		}
	}
}

func TestUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		unit string
		want time.Duration
	}{
		{name: "whole seconds", unit: "1", want: time.Second},
		{name: "a minute in seconds", unit: "60", want: time.Minute},
		{name: "whole float", unit: "2.0", want: 2 * time.Second},
		{name: "yaml underscore", unit: "3_600", want: time.Hour},
		{name: "seconds string", unit: "1s", want: time.Second},
		{name: "milliseconds", unit: "500ms", want: 500 * time.Millisecond},
		{name: "minute", unit: "1m", want: time.Minute},
		{name: "compound", unit: "1h30m", want: 90 * time.Minute},
		{name: "fraction in a string", unit: `"1.5s"`, want: 1500 * time.Millisecond},
		{name: "quoted duration", unit: `"10s"`, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, "rules.yaml", []byte("configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: "+tt.unit+"}\n"))
			if got := r.Apps[0].Limits[0].Params.Window; got != tt.want {
				t.Errorf("unit %s: got %v, want %v", tt.unit, got, tt.want)
			}
		})
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		want   []string
	}{
		{name: "absent", method: "", want: nil},
		{name: "string", method: "method: GET", want: []string{"GET"}},
		{name: "lower-case string", method: "method: get", want: []string{"GET"}},
		{name: "list", method: "method: [POST, get]", want: []string{"GET", "POST"}},
		{name: "block list", method: "method:\n          - delete\n          - PATCH", want: []string{"DELETE", "PATCH"}},
		{name: "extension method", method: "method: PROPFIND", want: []string{"PROPFIND"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        " + tt.method + "\n"
			r := mustParse(t, "rules.yaml", []byte(data))
			if got := r.Apps[0].Limits[0].Methods; !slices.Equal(got, tt.want) {
				t.Errorf("methods: got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotDuplicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
	}{
		{name: "different methods", data: `
configs:
  - appId: a
    limits:
      - {api: /v1/user, method: GET, limit: 1}
      - {api: /v1/user, method: [POST, PUT], limit: 1}
`},
		{name: "with and without methods", data: `
configs:
  - appId: a
    limits:
      - {api: /v1/user, method: GET, limit: 1}
      - {api: /v1/user, limit: 1}
`},
		{name: "literal and variable", data: `
configs:
  - appId: a
    limits:
      - {api: /v1/user/me, limit: 1}
      - {api: "/v1/user/{id}", limit: 1}
`},
		{name: "case differs and file is case-sensitive", data: `
caseSensitive: true
configs:
  - appId: a
    limits:
      - {api: /v1/User, limit: 1}
      - {api: /v1/user, limit: 1}
`},
		{name: "case differs beyond ASCII and file is case-insensitive", data: `
caseInsensitive: true
configs:
  - appId: a
    limits:
      - {api: /v1/É, limit: 1}
      - {api: /v1/é, limit: 1}
`},
		{name: "same api in different apps", data: `
configs:
  - appId: a
    limits: [{api: /v1/user, limit: 1}]
  - appId: b
    limits: [{api: /v1/user, limit: 1}]
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mustParse(t, "rules.yaml", src(tt.data))
		})
	}
}

// TestAliases checks that YAML anchors, aliases and merge keys work as
// YAML users expect.
func TestAliases(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", src(`
configs:
  - appId: a
    limits: &common
      - &user {api: /v1/user, limit: 100, unit: 60}
      - {api: /v1/order, limit: 5}
  - appId: b
    limits: *common
  - appId: c
    limits:
      - <<: *user
        limit: 7
      - <<: [{api: /x, limit: 1}, {api: /y, limit: 2, shadow: true}]
`))
	if got, want := len(r.Apps[1].Limits), 2; got != want {
		t.Fatalf("b's limits: got %d, want %d", got, want)
	}
	if got, want := r.Apps[1].Limits[0].Params, sw(100, time.Minute, 10); got != want {
		t.Errorf("b's first rule: got %+v, want %+v", got, want)
	}
	c := r.Apps[2].Limits
	if got, want := c[0].Params, sw(7, time.Minute, 10); got != want {
		t.Errorf("merged rule: got %+v, want %+v", got, want)
	}
	if got, want := c[0].API, "/v1/user"; got != want {
		t.Errorf("merged rule api: got %q, want %q", got, want)
	}
	if got, want := c[1].API, "/x"; got != want {
		t.Errorf("rule merged from a list: api: got %q, want %q (the first mapping wins)", got, want)
	}
	if got, want := c[1].Shadow, true; got != want {
		t.Errorf("rule merged from a list: shadow: got %v, want %v", got, want)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	a, b := sha256.Sum256([]byte("key-a")), sha256.Sum256([]byte("key-b"))
	r := mustParse(t, "rules.yaml", src(`
configs:
  - appId: a
    limit: 1
    keys:
      - `+hex.EncodeToString(a[:])+`
      - `+strings.ToUpper(hex.EncodeToString(b[:]))+`
  - {appId: b, limit: 1}
`))
	if got := r.Apps[0].Keys; len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("app a: keys: got %x, want [%x %x]", got, a, b)
	}
	if r.Apps[1].Keys != nil {
		t.Errorf("app b: keys: got %x, want none", r.Apps[1].Keys)
	}
}

func TestKeysErrors(t *testing.T) {
	t.Parallel()
	d := sha256.Sum256([]byte("k"))
	digest := hex.EncodeToString(d[:])
	r, err := Parse("rules.yaml", []byte(src(`
configs:
  - appId: a
    limit: 1
    keys: []
  - appId: b
    limit: 1
    keys: `+digest+`
  - appId: c
    limit: 1
    keys:
      - my-secret-key
      - `+digest[:63]+`g
      - 423456789012345678
      - `+digest+`
      - `+digest+`
  - appId: "*"
    limit: 1
    keys: [`+digest+`]
`)))
	if r != nil {
		t.Fatalf("Parse returned rules for a bad file")
	}
	checkErrors(t, err, []wantErr{
		{4, "keys is an empty list, which would admit no caller"},
		{7, "keys must be a list of key digests, each the sha256 of a key as 64 hex digits"},
		{11, "this key is not a sha256 digest: it has 13 characters, not 64"},
		{12, "this key is not a sha256 digest: it is not hexadecimal"},
		{13, "each key must be the sha256 of a key as 64 hex digits"},
		{15, "this key digest is already listed at line 14; list it once"},
		{18, `keys cannot be set on the "*" section`},
	})
	if strings.Contains(err.Error(), "my-secret-key") || strings.Contains(err.Error(), "423456789012345678") || strings.Contains(err.Error(), digest[:20]) {
		t.Errorf("the error repeats a key given in clear: %v", err)
	}
}
