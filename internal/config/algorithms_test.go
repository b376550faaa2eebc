package config

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestAlgorithmSettings checks the Params of every algorithm, and which
// optional settings a rule gets from its section, from defaults and
// built in.
func TestAlgorithmSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		file  string // "rules.yaml" when empty
		data  string
		total *limit.Params
		rules []limit.Params
	}{
		{
			name: "each algorithm",
			data: `
configs:
  - appId: a
    limits:
      - {api: /sw, limit: 10}
      - {api: /fw, limit: 10, algorithm: fixed_window}
      - {api: /sl, limit: 10, algorithm: sliding_log}
      - {api: /tb, limit: 10, algorithm: token_bucket, burst: 20, warmup: 30s}
      - {api: /lb, limit: 10, algorithm: leaky_bucket, burst: 5}
`,
			rules: []limit.Params{
				{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Precision: 10},
				{Algorithm: "fixed_window", Limit: 10, Window: time.Second},
				{Algorithm: "sliding_log", Limit: 10, Window: time.Second},
				{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 20, Warmup: 30 * time.Second},
				{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, Burst: 5},
			},
		},
		{
			// The example rule file sets precision in defaults and uses
			// the buckets too.
			name: "a default precision applies to sliding windows only",
			data: `
defaults: {precision: 30}
configs:
  - appId: a
    limit: 100
    algorithm: fixed_window
    limits:
      - {api: /sw, limit: 10}
      - {api: /tb, limit: 10, algorithm: token_bucket}
      - {api: /sw2, limit: 10, algorithm: sliding_window}
`,
			total: &limit.Params{Algorithm: "fixed_window", Limit: 100, Window: time.Second},
			rules: []limit.Params{
				{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Precision: 30},
				{Algorithm: "token_bucket", Limit: 10, Window: time.Second},
				{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Precision: 30},
			},
		},
		{
			name: "a default burst applies to both buckets, a default warmup to the token bucket",
			data: `
defaults: {algorithm: token_bucket, burst: 50, warmup: 10s, unit: 1m}
configs:
  - appId: a
    limits:
      - {api: /tb, limit: 10}
      - {api: /lb, limit: 10, algorithm: leaky_bucket}
      - {api: /sw, limit: 10, algorithm: sliding_window}
      - {api: /own, limit: 10, burst: 3, warmup: "0s"}
`,
			rules: []limit.Params{
				{Algorithm: "token_bucket", Limit: 10, Window: time.Minute, Burst: 50, Warmup: 10 * time.Second},
				{Algorithm: "leaky_bucket", Limit: 10, Window: time.Minute, Burst: 50},
				{Algorithm: "sliding_window", Limit: 10, Window: time.Minute, Precision: 10},
				{Algorithm: "token_bucket", Limit: 10, Window: time.Minute, Burst: 3},
			},
		},
		{
			name: "lockSeconds from defaults, the app and the rule",
			data: `
defaults: {lockSeconds: 60}
configs:
  - appId: a
    limit: 100
    lockSeconds: 5
    limits:
      - {api: /inherits, limit: 10}
      - {api: /none, limit: 10, lockSeconds: 0}
      - {api: /own, limit: 10, lockSeconds: 3600, algorithm: sliding_log}
`,
			total: &limit.Params{Algorithm: "sliding_window", Limit: 100, Window: time.Second, Precision: 10, Lock: 5 * time.Second},
			rules: []limit.Params{
				{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Precision: 10, Lock: time.Minute},
				{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Precision: 10},
				{Algorithm: "sliding_log", Limit: 10, Window: time.Second, Lock: time.Hour},
			},
		},
		{
			name: "warmup 0 is none",
			data: `
configs:
  - appId: a
    limits:
      - {api: /a, limit: 10, algorithm: token_bucket, warmup: 0}
      - {api: /b, limit: 10, algorithm: token_bucket, warmup: 1m30s}
`,
			rules: []limit.Params{
				{Algorithm: "token_bucket", Limit: 10, Window: time.Second},
				{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Warmup: 90 * time.Second},
			},
		},
		{
			name: "json",
			file: "rules.json",
			data: `{"configs": [{"appId": "a", "limits": [
  {"api": "/", "limit": 10, "algorithm": "token_bucket", "warmup": "30s", "lockSeconds": 10}]}]}`,
			rules: []limit.Params{
				{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Warmup: 30 * time.Second, Lock: 10 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := tt.file
			if file == "" {
				file = "rules.yaml"
			}
			r := mustParse(t, file, src(tt.data))
			app := r.Apps[0]
			switch {
			case tt.total == nil && app.Total != nil:
				t.Errorf("total: got %+v, want nil", *app.Total)
			case tt.total != nil && app.Total == nil:
				t.Errorf("total: got nil, want %+v", *tt.total)
			case tt.total != nil && *app.Total != *tt.total:
				t.Errorf("total: got %+v, want %+v", *app.Total, *tt.total)
			}
			if len(app.Limits) != len(tt.rules) {
				t.Fatalf("rules: got %d, want %d", len(app.Limits), len(tt.rules))
			}
			for i, want := range tt.rules {
				if got := app.Limits[i].Params; got != want {
					t.Errorf("rule %s: got %+v, want %+v", app.Limits[i].API, got, want)
				}
			}
		})
	}
}

// TestAlgorithmSettingErrors checks each problem with warmup, lockSeconds
// and the settings that only some algorithms read, and its line.
func TestAlgorithmSettingErrors(t *testing.T) {
	t.Parallel()
	// rule is a file with one rule whose last line (6) is extra.
	rule := func(extra string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /\n        limit: 10\n        " + extra + "\n"
	}
	tests := []struct {
		name string
		file string // "rules.yaml" when empty
		data string
		want []wantErr
	}{
		// warmup.
		{name: "warmup a number", data: rule("warmup: 30"), want: []wantErr{
			{6, `warmup 30 has no time unit; write a duration like "30s"`},
		}},
		{name: "warmup without a unit", data: rule(`warmup: "30"`), want: []wantErr{
			{6, `warmup "30" has no time unit; write "30s"`},
		}},
		{name: "warmup not a duration", data: rule("warmup: soon"), want: []wantErr{
			{6, `warmup "soon" is not a duration; write one like "30s" or "2m"`},
		}},
		{name: "warmup negative", data: rule("warmup: -5s"), want: []wantErr{
			{6, `warmup "-5s" is negative; write a duration like "30s", or 0 for no warm-up`},
		}},
		{name: "warmup a bool", data: rule("warmup: true"), want: []wantErr{
			{6, `warmup must be a duration like "30s", not true`},
		}},
		{name: "warmup on a sliding window", data: rule("warmup: 30s"), want: []wantErr{
			{6, "warmup applies only to token_bucket"},
		}},
		{name: "warmup too long", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        warmup: 25h\n        algorithm: token_bucket\n        limit: 10\n", want: []wantErr{
			{5, "warmup 25h0m0s is longer than 24h0m0s"},
		}},
		{
			name: "default warmup on the default algorithm is reported once",
			data: "defaults:\n  warmup: 10s\nconfigs:\n  - appId: a\n    limits:\n      - {api: /a, limit: 1}\n      - {api: /b, limit: 1}\n      - {api: /c, limit: 1, algorithm: token_bucket}\n",
			want: []wantErr{{2, "warmup applies only to token_bucket"}},
		},

		// lockSeconds.
		{name: "lockSeconds negative", data: rule("lockSeconds: -1"), want: []wantErr{
			{6, "lockSeconds -1 is negative; set how many seconds a caller stays denied once it is limited, or 0 for no lockout"},
		}},
		{name: "lockSeconds a fraction", data: rule("lockSeconds: 1.5"), want: []wantErr{
			{6, "lockSeconds must be a whole number, not 1.5"},
		}},
		{name: "lockSeconds a duration", data: rule("lockSeconds: 10s"), want: []wantErr{
			{6, `lockSeconds must be a whole number, not the string "10s"`},
		}},
		{name: "lockSeconds over 100 years", data: rule("lockSeconds: 4000000000"), want: []wantErr{
			{6, "lockSeconds 4000000000 is longer than 100 years"},
		}},
		{name: "lockSeconds too long", data: rule("lockSeconds: 99999999999"), want: []wantErr{
			{6, "lockSeconds 99999999999 is too long"},
		}},
		{name: "lockSeconds on an app without a total", data: "configs:\n  - appId: a\n    lockSeconds: 60\n    limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{3, "lockSeconds on an app section applies to the app's total limit, but the section has no limit"},
		}},
		{name: "lockSeconds in json", file: "rules.json", data: "{\"configs\": [{\"appId\": \"a\", \"limits\": [\n{\"api\": \"/\", \"limit\": 1, \"lockSeconds\": -3}]}]}", want: []wantErr{
			{2, "lockSeconds -3 is negative"},
		}},

		// Settings an algorithm does not read, and algorithm limits.
		{name: "precision on a token bucket", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        precision: 20\n        algorithm: token_bucket\n        limit: 10\n", want: []wantErr{
			{5, "precision applies only to sliding_window"},
		}},
		{name: "burst on a fixed window", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        burst: 20\n        algorithm: fixed_window\n        limit: 10\n", want: []wantErr{
			{5, "burst applies only to token_bucket and leaky_bucket"},
		}},
		{name: "default precision on the defaults' own bucket", data: "defaults:\n  algorithm: leaky_bucket\n  precision: 20\nconfigs:\n  - appId: a\n    limits: [{api: /, limit: 1}]\n", want: []wantErr{
			{3, "precision applies only to sliding_window"},
		}},
		{name: "app total with a precision it does not read", data: "configs:\n  - appId: a\n    limit: 10\n    algorithm: leaky_bucket\n    precision: 5\n", want: []wantErr{
			{5, "the app's total limit: precision applies only to sliding_window"},
		}},
		{name: "sliding log limit too high", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        algorithm: sliding_log\n        limit: 20000\n", want: []wantErr{
			{6, "limit 20000 is above 10000, the most sliding_log keeps"},
		}},
		{name: "bucket that refills too slowly", data: "configs:\n  - appId: a\n    limits:\n      - api: /\n        algorithm: token_bucket\n        burst: 1000000\n        unit: 86400\n        limit: 1\n", want: []wantErr{
			{6, "burst 1000000 takes more than 100 years to refill at 1 per 24h0m0s"},
		}},
		{name: "unknown setting suggests lockSeconds", data: rule("lockSecond: 5"), want: []wantErr{
			{6, `unknown field "lockSecond" in this rule (did you mean "lockSeconds"?)`},
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
