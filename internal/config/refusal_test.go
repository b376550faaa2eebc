package config

import (
	"testing"
	"time"
)

func TestRefusalSettings(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", []byte(`
upstreams:
  - name: llm
    targets: ["http://127.0.0.1:9"]
routes:
  - {path: /v1, upstream: llm, errorFormat: openai, retryAfterMax: 1m}
plans:
  - name: p
    errorFormat: anthropic
    retryAfterMax: 20s
    limits:
      - {api: /a, limit: 1}
      - {api: /b, limit: 1, errorFormat: default}
configs:
  - appId: app
    plan: p
    limits:
      - {api: /c, limit: 1, retryAfterMax: 5s}
`))
	if got, want := r.Routes[0].Refusal, (Refusal{Format: FormatOpenAI, RetryAfterMax: time.Minute}); got != want {
		t.Errorf("route: got %+v, want %+v", got, want)
	}
	want := map[string]Refusal{
		"/c": {RetryAfterMax: 5 * time.Second},
		"/a": {Format: FormatAnthropic, RetryAfterMax: 20 * time.Second},
		"/b": {Format: FormatDefault, RetryAfterMax: 20 * time.Second},
	}
	for _, rule := range r.Apps[0].Limits {
		if got := rule.Refusal; got != want[rule.API] {
			t.Errorf("rule %s: got %+v, want %+v", rule.API, got, want[rule.API])
		}
	}
}

func TestRefusalErrors(t *testing.T) {
	t.Parallel()
	rule := func(s string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 100\n        " + s + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"unknown format", rule("errorFormat: gemini"), []wantErr{{6, `errorFormat "gemini" is not one of openai, anthropic, default`}}},
		{"cap without unit", rule("retryAfterMax: 60"), []wantErr{{6, "has no time unit"}}},
		{"cap below a second", rule("retryAfterMax: 500ms"), []wantErr{{6, "must be whole seconds from 1s"}}},
		{"cap not whole seconds", rule("retryAfterMax: 1500ms"), []wantErr{{6, "must be whole seconds"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
