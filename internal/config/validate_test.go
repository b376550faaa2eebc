package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A wantErr is one expected problem: its line and a distinctive part of
// its message.
type wantErr struct {
	line int
	msg  string
}

// checkErrors checks that err is an Errors holding exactly want, in order.
func checkErrors(t *testing.T, err error, want []wantErr) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got error %v (%T), want Errors", err, err)
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i := range min(len(errs), len(want)) {
		got, w := errs[i], want[i]
		if got.Line != w.line {
			t.Errorf("error %d line: got %d, want %d (%s)", i, got.Line, w.line, got.Msg)
		}
		if !strings.Contains(got.Msg, w.msg) {
			t.Errorf("error %d message: got %q, want it to contain %q", i, got.Msg, w.msg)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string // "rules.yaml" when empty
		data string
		want []wantErr
	}{
		// The file as a whole.
		{name: "empty file", data: "", want: []wantErr{{0, "the rule file has no configs; add a configs list"}}},
		{name: "only comments", data: "# nothing yet\n", want: []wantErr{{0, "the rule file has no configs"}}},
		{name: "empty document", data: "---\n", want: []wantErr{{2, "the rule file has no configs"}}},
		{name: "null", data: "~\n", want: []wantErr{{1, "the rule file has no configs"}}},
		{name: "no configs key", data: "caseInsensitive: true\n", want: []wantErr{{0, "the rule file has no configs"}}},
		{name: "empty configs", data: "defaults: {unit: 1}\nconfigs: []\n", want: []wantErr{{2, "the rule file has no configs"}}},
		{name: "empty json", file: "rules.json", data: " \n", want: []wantErr{{0, "the rule file has no configs"}}},
		{name: "json null", file: "rules.json", data: "null", want: []wantErr{{1, "the rule file has no configs"}}},
		{name: "top level is a list", data: "- appId: a\n", want: []wantErr{{1, "the rule file must be a mapping with a configs list, not a list"}}},
		{name: "top level is an array", file: "rules.json", data: "[]", want: []wantErr{{1, "must be an object with a configs list, not an array"}}},
		{
			name: "yaml syntax error",
			data: `
configs:
  - appId: a
    limits: [{api: /, limit: 1}
  - appId: b
`,
			want: []wantErr{{3, "the file is not valid YAML: did not find expected ',' or ']'"}},
		},
		{
			name: "yaml bad indentation",
			data: `
configs:
  - appId: a
   limits: []
`,
			want: []wantErr{{3, "the file is not valid YAML: did not find expected '-' indicator"}},
		},
		{
			name: "yaml misindented key deep in a block",
			data: `
configs:
  - appId: a
    limit: 1
  - appId: b
    limits:
      - api: /
        limit: 1
       unit: 1
`,
			want: []wantErr{{8, "the file is not valid YAML: did not find expected '-' indicator"}},
		},
		{name: "yaml misindented key", data: "configs:\n  - appId: b\n    limits:\n    - api: /\n      limit: 1\n     unit: 1\n", want: []wantErr{{6, "the file is not valid YAML: did not find expected key"}}},
		{name: "yaml missing colon", data: "configs:\n  - appId: a\n    limit 1\n    by: ip\n", want: []wantErr{{3, "the file is not valid YAML: could not find expected ':'"}}},
		{name: "yaml unclosed flow at the end", data: "configs: [a,\n", want: []wantErr{{1, "the file is not valid YAML: did not find expected node content"}}},
		{name: "yaml control character", data: "configs:\n  - appId: a\x01\n", want: []wantErr{{2, "the file is not valid YAML: control characters are not allowed"}}},
		{name: "yaml invalid utf-8", data: "configs:\n  - appId: a\n    limits: \xff\n", want: []wantErr{{3, "the file is not valid YAML"}}},
		{name: "yaml tab indentation", data: "configs:\n\t- appId: a\n", want: []wantErr{{2, "the file is not valid YAML"}}},
		{name: "yaml unknown alias", data: "configs:\n  - appId: a\n    limits: *rules\n", want: []wantErr{{3, "the alias *rules names no anchor"}}},
		{
			name: "json syntax error",
			file: "rules.json",
			data: `
{
  "configs": [
    {"appId": "a", "limits": [{"api": "/", "limit": 1}]},
  ]
}
`,
			want: []wantErr{{4, "the file is not valid JSON: invalid character ']'"}},
		},
		{name: "json truncated", file: "rules.json", data: "{\n  \"configs\": [\n", want: []wantErr{{2, "the file is not valid JSON: unexpected end of JSON input"}}},
		{name: "json trailing data", file: "rules.json", data: "{}\n{}\n", want: []wantErr{{2, "the file is not valid JSON: invalid character '{' after top-level value"}}},
		{
			name: "multiple documents",
			data: `
configs:
  - {appId: a, limit: 1}
---
configs:
  - {appId: b, limit: 1}
`,
			want: []wantErr{{3, "the rule file has more than one YAML document"}},
		},
		{
			name: "duplicate key",
			data: `
configs:
  - appId: a
    limits:
      - api: /
        limit: 1
        limit: 2
`,
			want: []wantErr{{6, `"limit" is set twice in this rule (first at line 5)`}},
		},
		{
			name: "duplicate key in json",
			file: "rules.json",
			data: `
{
  "configs": [{"appId": "a", "limit": 1}],
  "configs": []
}
`,
			want: []wantErr{{3, `"configs" is set twice in the top level (first at line 2)`}},
		},

		// Unknown fields.
		{name: "unknown top-level field", data: "config:\n  - {appId: a, limit: 1}\n", want: []wantErr{
			{0, "the rule file has no configs"},
			{1, `unknown field "config" in the top level (did you mean "configs"?); the allowed fields are caseSensitive, caseInsensitive, defaults, plans, configs`},
		}},
		{name: "unknown defaults field", data: "defaults: {shadow: true}\nconfigs: [{appId: a, limit: 1}]\n", want: []wantErr{
			{1, `unknown field "shadow" in defaults; the allowed fields are algorithm, unit, precision, burst`},
		}},
		{name: "unknown app field", data: "configs:\n  - appId: a\n    app_id: b\n    limit: 1\n", want: []wantErr{
			{3, `unknown field "app_id" in this app section (did you mean "appId"?); the allowed fields are appId, by, missing, limit, unit, algorithm, precision, burst, limits`},
		}},
		{name: "unknown rule field", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limt: 5\n", want: []wantErr{
			{4, "this rule has no limit"},
			{5, `unknown field "limt" in this rule (did you mean "limit"?); the allowed fields are api, method, by, missing, limit, unit, algorithm, precision, burst, shadow`},
		}},
		{name: "unknown field with case", data: "configs:\n  - appid: a\n    limit: 1\n", want: []wantErr{
			{2, "this app section has no appId"},
			{2, `unknown field "appid" in this app section (did you mean "appId"?)`},
		}},
		{name: "unknown json field", file: "rules.json", data: "{\"configs\": [{\"appId\": \"a\", \"limit\": 1,\n \"methods\": [\"GET\"]}]}", want: []wantErr{
			{2, `unknown field "methods" in this app section`},
		}},

		// Wrong types.
		{name: "limit is a string", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: abc\n", want: []wantErr{
			{5, `limit must be a whole number, not the string "abc"`},
		}},
		{name: "limit is quoted", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: \"5\"\n", want: []wantErr{
			{5, `limit must be a whole number, not the string "5"`},
		}},
		{name: "limit is a fraction", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 2.5\n", want: []wantErr{
			{5, "limit must be a whole number, not 2.5"},
		}},
		{name: "limit is empty", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit:\n", want: []wantErr{
			{5, "limit must be a whole number, not empty"},
		}},
		{name: "limits is a number", data: "configs:\n  - appId: a\n    limits: 5\n", want: []wantErr{
			{3, "limits must be a list of rules, not the number 5"},
		}},
		{name: "limits is an object in json", file: "rules.json", data: `{"configs": [{"appId": "a", "limits": {"api": "/"}}]}`, want: []wantErr{
			{1, "limits must be an array of rules, not an object"},
		}},
		{name: "configs is a mapping", data: "configs:\n  appId: a\n", want: []wantErr{
			{1, "configs must be a list of app sections, not a mapping"},
		}},
		{name: "configs entry is a string", data: "configs:\n  - app-1\n", want: []wantErr{
			{2, `each entry of configs must be a mapping with an appId and its limits, not the string "app-1"`},
		}},
		{name: "rule is a string", data: "configs:\n  - appId: a\n    limits:\n      - /v1/user\n", want: []wantErr{
			{4, `each entry of limits must be a mapping with api and limit, not the string "/v1/user"`},
		}},
		{name: "defaults is a list", data: "defaults: [1]\nconfigs: [{appId: a, limit: 1}]\n", want: []wantErr{
			{1, "defaults must be a mapping of algorithm, unit, precision, burst, not a list"},
		}},
		{name: "shadow is not a bool", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, shadow: yes}\n", want: []wantErr{
			{4, `shadow must be true or false, not the string "yes"`},
		}},
		{name: "caseSensitive contradicted", data: "caseSensitive: true\ncaseInsensitive: true\nconfigs: [{appId: a, limit: 1}]\n", want: []wantErr{
			{2, "caseInsensitive: true contradicts caseSensitive: true on line 1; keep caseSensitive only"},
		}},
		{name: "caseInsensitive is not a bool", data: "caseInsensitive: 1\nconfigs: [{appId: a, limit: 1}]\n", want: []wantErr{
			{1, "caseInsensitive must be true or false, not the number 1"},
		}},
		{name: "appId is a number", data: "configs:\n  - appId: 1001\n    limit: 1\n", want: []wantErr{
			{2, "appId must be a string, not the number 1001; put the value in quotes"},
		}},
		{name: "api is a list", data: "configs:\n  - appId: a\n    limits:\n      - {api: [/a], limit: 1}\n", want: []wantErr{
			{4, "api must be a string, not a list"},
		}},
		{name: "algorithm is a number", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, algorithm: 1}\n", want: []wantErr{
			{4, "algorithm must be a string, not the number 1"},
		}},
		{name: "key is a list", data: "configs:\n  - appId: a\n    limit: 1\n    ? [x]\n    : 1\n", want: []wantErr{
			{4, "a key in this app section is a list; keys must be plain field names"},
		}},

		// App sections.
		{name: "missing appId", data: "configs:\n  - limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{2, `this app section has no appId; set appId to the caller's app ID, or to "*"`},
		}},
		{name: "empty appId", data: "configs:\n  - appId: \"\"\n    limit: 1\n", want: []wantErr{
			{2, `appId "" is not valid; use "*" or 1 to 128 of the characters`},
		}},
		{name: "appId with a space", data: "configs:\n  - appId: app 1\n    limit: 1\n", want: []wantErr{
			{2, `appId "app 1" is not valid`},
		}},
		{name: "appId with a star", data: "configs:\n  - appId: app*\n    limit: 1\n", want: []wantErr{
			{2, `appId "app*" is not valid`},
		}},
		{name: "appId too long", data: "configs:\n  - appId: " + strings.Repeat("a", 129) + "\n    limit: 1\n", want: []wantErr{
			{2, "is not valid; use \"*\" or 1 to 128"},
		}},
		{name: "duplicate appId", data: `
configs:
  - appId: app-1
    limit: 1
  - appId: app-2
    limit: 1
  - appId: app-1
    limit: 2
`, want: []wantErr{{6, `appId "app-1" is already configured at line 2; merge the two sections into one`}}},
		{name: "duplicate star", data: "configs:\n  - {appId: \"*\", limit: 1}\n  - {appId: \"*\", limit: 2}\n", want: []wantErr{
			{3, `appId "*" is already configured at line 2`},
		}},
		{name: "duplicate appId by alias", data: "configs:\n  - &a {appId: a, limit: 1}\n  - *a\n", want: []wantErr{
			{3, `appId "a" is already configured at line 2`},
		}},
		{name: "invalid by", data: "configs:\n  - appId: a\n    by: user\n    limit: 1\n", want: []wantErr{
			{3, `by "user" is not valid; use app, ip, global, header:NAME, query:NAME, claim:NAME, body:FIELD, or a list`},
		}},
		{name: "unknown by kind", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        by: cookie:sid\n        limit: 1\n", want: []wantErr{
			{5, `by "cookie:sid" is not valid; use app, ip, global, header:NAME, query:NAME`},
		}},
		{name: "by names no header", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        by: \"header:\"\n        limit: 1\n", want: []wantErr{
			{5, `by "header:" names no header; write header:NAME, like header:X-User-Id`},
		}},
		{name: "by names no query parameter in a list", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        by:\n          - ip\n          - \"query: \"\n        limit: 1\n", want: []wantErr{
			{7, `by "query:" names no query; write query:NAME, like query:user`},
		}},
		{name: "by claim name with a space", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        by: \"claim:a b\"\n        limit: 1\n", want: []wantErr{
			{5, `by "claim:a b": a claim name here is printable ASCII without spaces or commas`},
		}},
		{name: "by names no claim", data: "configs:\n  - appId: a\n    by: \"claim:\"\n    limit: 1\n", want: []wantErr{
			{3, `by "claim:" names no claim; write claim:NAME, like claim:sub`},
		}},
		{name: "by header name not a token", data: "configs:\n  - appId: a\n    by: \"header:X User\"\n    limit: 1\n", want: []wantErr{
			{3, `by "header:X User": "X User" is not a header name`},
		}},
		{name: "by app in a list", data: "configs:\n  - appId: a\n    by: [ip, app]\n    limit: 1\n", want: []wantErr{
			{3, `by app cannot be combined with other parts`},
		}},
		{name: "by part twice", data: "configs:\n  - appId: a\n    by: [header:x-user, header:X-User]\n    limit: 1\n", want: []wantErr{
			{3, `by lists header:X-User twice; list it once`},
		}},
		{name: "by empty list", data: "defaults:\n  by: []\nconfigs:\n  - appId: a\n    limit: 1\n", want: []wantErr{
			{2, `by is an empty list`},
		}},
		{name: "by wrong type", data: "configs:\n  - appId: a\n    by: 5\n    limit: 1\n", want: []wantErr{
			{3, `by must be a string or a list of strings`},
		}},
		{name: "bad missing", data: "defaults:\n  missing: drop\nconfigs:\n  - appId: a\n    missing: allow\n    limits:\n      - api: /\n        by: header:X-User\n        missing: none\n        limit: 1\n", want: []wantErr{
			{2, `missing "drop" is not valid; use ip (count the caller per client address, the default), share (one counter for every caller without it) or deny (refuse with 400)`},
			{5, `missing "allow" is not valid`},
			{9, `missing "none" is not valid`},
		}},
		{name: "app does nothing", data: "configs:\n  - appId: a\n    by: ip\n", want: []wantErr{
			{2, "this app section has neither limit nor limits, so it would do nothing"},
		}},
		{name: "app settings without a total", data: "configs:\n  - appId: a\n    unit: 60\n    limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{3, "unit on an app section applies to the app's total limit, but the section has no limit; set limit here, or move unit to each rule or to defaults"},
		}},
		{name: "app total below -1", data: "configs:\n  - appId: a\n    limit: -5\n", want: []wantErr{
			{3, "limit -5 is below -1"},
		}},
		{name: "app total with a bad burst", data: "configs:\n  - appId: a\n    limit: 10\n    burst: 3\n", want: []wantErr{
			{4, "the app's total limit: burst applies only to token_bucket and leaky_bucket"},
		}},

		// Rules.
		{name: "missing limit", data: "configs:\n  - appId: a\n    limits:\n      - api: /v1/user\n        unit: 1\n", want: []wantErr{
			{4, "this rule has no limit; set limit to the number of requests allowed per unit"},
		}},
		{name: "missing api", data: "configs:\n  - appId: a\n    limits:\n      - limit: 1\n", want: []wantErr{
			{4, "this rule has no api; set api to the path it limits, like /v1/user"},
		}},
		{name: "empty api", data: "configs:\n  - appId: a\n    limits:\n      - limit: 1\n        api: \"\"\n", want: []wantErr{
			{5, `api pattern is empty (use "/" to match every path)`},
		}},
		{name: "api without a slash", data: "configs:\n  - appId: a\n    limits:\n      - {api: v1/user, limit: 1}\n", want: []wantErr{
			{4, `api pattern "v1/user" must start with "/"`},
		}},
		{name: "api with an empty variable", data: "configs:\n  - appId: a\n    limits:\n      - {api: \"/v1/{}\", limit: 1}\n", want: []wantErr{
			{4, `has an unnamed variable "{}"`},
		}},
		{name: "api with a dot segment", data: "configs:\n  - appId: a\n    limits:\n      - {api: /v1/../admin, limit: 1}\n", want: []wantErr{
			{4, `has a ".." segment`},
		}},
		{name: "limit below -1", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: -2\n", want: []wantErr{
			{5, "limit -2 is below -1; use -1 for unlimited or 0 to block every request"},
		}},
		{name: "limit above the maximum", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 4294967296\n", want: []wantErr{
			{5, "limit 4294967296 is above the maximum 2147483647"},
		}},
		{name: "limit out of range", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 99999999999999999999\n", want: []wantErr{
			{5, "limit 99999999999999999999 is out of range"},
		}},

		// Units.
		{name: "unit zero", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        unit: 0\n", want: []wantErr{
			{6, "unit 0 is not positive"},
		}},
		{name: "unit negative", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: -60}\n", want: []wantErr{
			{4, "unit -60 is not positive"},
		}},
		{name: "unit negative duration", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: -1s}\n", want: []wantErr{
			{4, `unit "-1s" is not positive`},
		}},
		{name: "unit zero duration", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: 0s}\n", want: []wantErr{
			{4, `unit "0s" is not positive`},
		}},
		{name: "unit unparsable", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: minute}\n", want: []wantErr{
			{4, `unit "minute" is not a duration; write whole seconds (60) or a duration like "500ms" or "1m"`},
		}},
		{name: "unit fractional seconds", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        unit: 1.5\n", want: []wantErr{
			{6, `unit 1.5 is not a whole number of seconds; write a fraction of a second as a duration like "1500ms"`},
		}},
		{name: "unit fractional seconds in json", file: "rules.json", data: "{\"configs\": [{\"appId\": \"a\", \"limits\": [\n{\"api\": \"/\", \"limit\": 1, \"unit\": 0.25}]}]}", want: []wantErr{
			{2, `write a fraction of a second as a duration like "250ms"`},
		}},
		{name: "unit seconds in a string", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: \"60\"}\n", want: []wantErr{
			{4, `unit "60" has no time unit; write 60 (seconds, without quotes) or "60s"`},
		}},
		{name: "unit too long", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: 10000000000}\n", want: []wantErr{
			{4, "unit 10000000000 seconds is too long"},
		}},
		{name: "unit a bool", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, unit: true}\n", want: []wantErr{
			{4, "unit must be whole seconds or a duration"},
		}},
		{name: "unit too short for the precision", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        unit: 5us\n", want: []wantErr{
			{6, "unit 5µs split into 10 buckets leaves less than 1µs per bucket"},
		}},

		// Algorithms and their settings.
		{name: "unknown algorithm", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        algorithm: magic\n", want: []wantErr{
			{6, `unknown algorithm "magic"; use one of: `},
		}},
		{name: "unknown default algorithm", data: "defaults:\n  algorithm: leaky\nconfigs:\n  - appId: a\n    limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{2, `unknown algorithm "leaky"`},
		}},
		{name: "precision zero", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        precision: 0\n", want: []wantErr{
			{6, "precision 0 is outside 1..1000"},
		}},
		{name: "precision too large", data: "defaults:\n  precision: 1001\nconfigs:\n  - appId: a\n    limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{2, "precision 1001 is outside 1..1000"},
		}},
		{name: "burst negative", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        burst: -1\n", want: []wantErr{
			{6, "burst -1 is outside 0..2147483647"},
		}},
		{name: "burst on sliding window", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        burst: 5\n", want: []wantErr{
			{6, "burst applies only to token_bucket and leaky_bucket"},
		}},
		{
			name: "default burst on sliding window is reported once",
			data: `
defaults:
  burst: 5
configs:
  - appId: a
    limits:
      - {api: /a, limit: 1}
      - {api: /b, limit: 1}
`,
			want: []wantErr{{2, "burst applies only to token_bucket and leaky_bucket"}},
		},
		{name: "bad default reported once", data: "defaults:\n  unit: 0\nconfigs:\n  - appId: a\n    limits:\n      - {api: /a, limit: 1}\n      - {api: /b, limit: 1}\n", want: []wantErr{
			{2, "unit 0 is not positive"},
		}},

		// Methods.
		{name: "method not a token", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        method: GE T\n", want: []wantErr{
			{6, `method "GE T" is not a valid HTTP method; write several methods as a list like [GET, POST]`},
		}},
		{name: "methods in one string", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: \"GET,POST\"}\n", want: []wantErr{
			{4, `method "GET,POST" is not a valid HTTP method; write several methods as a list like [GET, POST]`},
		}},
		{name: "method with a slash", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: G/T}\n", want: []wantErr{
			{4, `method "G/T" is not a valid HTTP method; use a name like GET or POST`},
		}},
		{name: "method not ASCII", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: ſ}\n", want: []wantErr{
			{4, `method "ſ" is not a valid HTTP method`},
		}},
		{name: "method empty", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: \"\"}\n", want: []wantErr{
			{4, `method "" is not a valid HTTP method`},
		}},
		{name: "method not a token in a list", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 1\n        method:\n          - GET\n          - \"P/ST\"\n", want: []wantErr{
			{8, `method "P/ST" is not a valid HTTP method`},
		}},
		{name: "method listed twice", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: [GET, post, get]}\n", want: []wantErr{
			{4, "method GET is listed twice; list it once"},
		}},
		{name: "method empty list", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: []}\n", want: []wantErr{
			{4, "method is an empty list; remove method to limit every method"},
		}},
		{name: "method a number", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: [1]}\n", want: []wantErr{
			{4, "method must be an HTTP method like GET or a list of them, not the number 1"},
		}},
		{name: "method a mapping", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1, method: {GET: 1}}\n", want: []wantErr{
			{4, "method must be a method or a list of methods, not a mapping"},
		}},

		// Duplicate rules.
		{name: "duplicate api", data: `
configs:
  - appId: a
    limits:
      - api: /v1/user
        limit: 1
      - api: /v1/order
        limit: 1
      - api: /v1/user
        limit: 2
`, want: []wantErr{{8, "api /v1/user is already limited by the rule at line 4; merge the two rules into one"}}},
		{name: "duplicate api with trailing slash", data: "configs:\n  - appId: a\n    limits:\n      - {api: /v1/user, limit: 1}\n      - {api: /v1/user/, limit: 1}\n", want: []wantErr{
			{5, "api /v1/user is already limited by the rule at line 4"},
		}},
		{name: "duplicate api with other variable names", data: "configs:\n  - appId: a\n    limits:\n      - {api: \"/v1/user/{id}\", limit: 1}\n      - {api: \"/v1/user/{uid}\", limit: 1}\n", want: []wantErr{
			{5, "api /v1/user/{uid} is already limited by the rule at line 4 (/v1/user/{id} matches the same paths)"},
		}},
		{name: "duplicate api and method", data: "configs:\n  - appId: a\n    limits:\n      - {api: /v1/user, method: [GET, PUT], limit: 1}\n      - {api: /v1/user, method: [POST, put], limit: 1}\n", want: []wantErr{
			{5, "api /v1/user with method PUT is already limited by the rule at line 4; remove PUT from one of them"},
		}},
		{name: "duplicate api when case-insensitive", data: "caseInsensitive: true\nconfigs:\n  - appId: a\n    limits:\n      - {api: /v1/User, limit: 1}\n      - {api: /v1/user, limit: 1}\n", want: []wantErr{
			{6, "api /v1/user is already limited by the rule at line 5 (/v1/User matches the same paths)"},
		}},
		{name: "duplicate api with caseInsensitive after configs", data: "configs:\n  - appId: a\n    limits:\n      - {api: /v1/User, limit: 1}\n      - {api: /v1/user, limit: 1}\ncaseInsensitive: true\n", want: []wantErr{
			{5, "api /v1/user is already limited by the rule at line 4"},
		}},
		{name: "duplicate root", data: "configs:\n  - appId: a\n    limits:\n      - {api: /, limit: 1}\n      - {api: //, limit: 1}\n", want: []wantErr{
			{5, `api pattern "//" has an empty segment`},
		}},
		{name: "duplicate api in an invalid rule", data: "configs:\n  - appId: a\n    limits:\n      - {api: /v1, limit: 1}\n      - {api: /v1, limit: -3}\n", want: []wantErr{
			{5, "api /v1 is already limited by the rule at line 4"},
			{5, "limit -3 is below -1"},
		}},

		// YAML aliases and merges.
		{name: "merge of itself", data: "configs:\n  - &app\n    appId: a\n    limit: 1\n    <<: *app\n", want: []wantErr{
			{5, "the merge key << in this app section merges a mapping that contains it"},
		}},
		{name: "merge of a scalar", data: "configs:\n  - appId: a\n    limit: 1\n    <<: 5\n", want: []wantErr{
			{4, "the merge key << in this app section must name a mapping"},
		}},
		{name: "merged unknown field", data: "x: &x {limt: 1}\nconfigs:\n  - appId: a\n    limits:\n      - <<: *x\n        api: /\n", want: []wantErr{
			{1, `unknown field "limt" in this rule`},
			{1, `unknown field "x" in the top level`},
			{5, "this rule has no limit"},
		}},
		{name: "aliased rule list with a problem is reported once", data: "configs:\n  - appId: a\n    limits: &l\n      - {api: /, limit: -9}\n  - appId: b\n    limits: *l\n", want: []wantErr{
			{4, "limit -9 is below -1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := tt.file
			if file == "" {
				file = "rules.yaml"
			}
			r, err := Parse(file, src(tt.data))
			if r != nil {
				t.Errorf("Parse: got rules %+v, want nil", r)
			}
			checkErrors(t, err, tt.want)
		})
	}
}

// TestParseReportsAll checks that every problem of a file is reported,
// not only the first.
func TestParseReportsAll(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/invalid.yaml")
	checkErrors(t, err, []wantErr{
		{3, "unit 0 is not positive"},
		{8, `limit must be a whole number, not the string "abc"`},
		{9, "api /v1/user is already limited by the rule at line 7"},
		{11, `unknown algorithm "magic"`},
		{12, `api pattern "v1/order" must start with "/"`},
		{14, `appId "app-1" is already configured at line 5`},
		{16, "this rule has no limit"},
		{17, `unknown field "limt" in this rule`},
	})
	for i, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "testdata/invalid.yaml:") {
			t.Errorf("line %d of the error: got %q, want it to start with the file name", i, line)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "file and line", err: &Error{File: "r.yaml", Line: 3, Msg: "bad"}, want: "r.yaml:3: bad"},
		{name: "no line", err: &Error{File: "r.yaml", Msg: "bad"}, want: "r.yaml: bad"},
		{name: "no file", err: &Error{Line: 3, Msg: "bad"}, want: "line 3: bad"},
		{name: "message only", err: &Error{Msg: "bad"}, want: "bad"},
		{name: "several", err: Errors{{File: "f", Line: 1, Msg: "a"}, {File: "f", Line: 2, Msg: "b"}}, want: "f:1: a\nf:2: b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error(): got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestErrorsAs(t *testing.T) {
	t.Parallel()
	_, err := Parse("r.yaml", []byte("configs: 5\n"))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(%v, *Error): got false, want true", err)
	}
	if got, want := e.Line, 1; got != want {
		t.Errorf("line: got %d, want %d", got, want)
	}
}

func TestErrorsSorted(t *testing.T) {
	t.Parallel()
	es := Errors{
		{Line: 5, Msg: "b"}, {Line: 2, Msg: "z"}, {Line: 5, Msg: "a"}, {Line: 2, Msg: "z"}, {Line: 0, Msg: "file"},
	}.sorted()
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%d:%s", e.Line, e.Msg))
	}
	if got, want := strings.Join(got, " "), "0:file 2:z 5:a 5:b"; got != want {
		t.Errorf("sorted: got %s, want %s", got, want)
	}
}
