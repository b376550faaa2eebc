package config

import "testing"

func TestMaxDelay(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", []byte("configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1, maxDelay: 1500ms}\n"))
	if got := r.Apps[0].Limits[0].MaxDelay.String(); got != "1.5s" {
		t.Errorf("maxDelay: got %s, want 1.5s", got)
	}
	rx := mustParse(t, "rules.xml", []byte(`<rules><config appId="a"><limit api="/c" limit="1" maxDelay="2s"/></config></rules>`))
	if got := rx.Apps[0].Limits[0].MaxDelay.String(); got != "2s" {
		t.Errorf("xml maxDelay: got %s, want 2s", got)
	}
}

func TestMaxDelayErrors(t *testing.T) {
	t.Parallel()
	rule := func(extra string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 1\n        " + extra + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"no unit", rule("maxDelay: 2"), []wantErr{{6, `maxDelay 2 has no time unit; write a duration like "2s"`}}},
		{"not a duration", rule("maxDelay: soon"), []wantErr{{6, `maxDelay "soon" is not a duration`}}},
		{"too long", rule("maxDelay: 2h"), []wantErr{{6, `maxDelay "2h" is outside (0, 1m0s]`}}},
		{"zero", rule("maxDelay: 0s"), []wantErr{{6, `is outside (0, 1m0s]`}}},
		{"on a shadow rule", rule("shadow: true\n        maxDelay: 1s"), []wantErr{{7, "maxDelay cannot be set on a shadow rule"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
