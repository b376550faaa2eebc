package config

import "testing"

func TestBodyKeyRules(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", []byte(`
configs:
  - appId: app
    by: body:user
    limits:
      - {api: /a, limit: 1, by: body:model, maxBody: 2048}
      - {api: /b, limit: 1, by: [ip, body:params.name]}
`))
	app := r.Apps[0]
	if app.By != "body:user" {
		t.Errorf("app by: got %q", app.By)
	}
	tests := []struct {
		by      By
		maxBody int
		parts   []KeyPart
	}{
		{"body:model", 2048, []KeyPart{{Kind: KeyBody, Name: "model"}}},
		{"ip,body:params.name", 0, []KeyPart{{Kind: KeyIP}, {Kind: KeyBody, Name: "params.name"}}},
	}
	for i, tc := range tests {
		rule := app.Limits[i]
		if rule.By != tc.by || rule.MaxBody != tc.maxBody {
			t.Errorf("rule %d: by %q, maxBody %d; want %q, %d", i, rule.By, rule.MaxBody, tc.by, tc.maxBody)
		}
		parts := rule.By.Parts()
		if len(parts) != len(tc.parts) {
			t.Fatalf("rule %d: parts %v, want %v", i, parts, tc.parts)
		}
		for j := range parts {
			if parts[j] != tc.parts[j] {
				t.Errorf("rule %d part %d: got %v, want %v", i, j, parts[j], tc.parts[j])
			}
		}
		if !rule.By.Body() || !rule.By.Attributes() {
			t.Errorf("rule %d: Body %v, Attributes %v; want both", i, rule.By.Body(), rule.By.Attributes())
		}
	}
	if got := (KeyPart{Kind: KeyBody, Name: "params.name"}).String(); got != "body:params.name" {
		t.Errorf("String: got %q", got)
	}
	if By("query:xbody:y").Body() {
		t.Error("a query parameter named xbody:y is not a body field")
	}
}

func TestBodyKeyErrors(t *testing.T) {
	t.Parallel()
	rule := func(s string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 100\n        " + s + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"no field", rule("by: 'body:'"), []wantErr{{6, `names no body; write body:NAME, like body:model`}}},
		{"empty field", rule("by: body:a..b"), []wantErr{{6, "has an empty field"}}},
		{"too deep", rule("by: body:a.b.c.d.e.f.g.h.i"), []wantErr{{6, "deeper than 8 fields"}}},
		{"maxBody without a body key", rule("maxBody: 4096"), []wantErr{{6, "maxBody applies only to a limit keyed on the request body"}}},
		{"maxBody too small", rule("by: body:model\n        maxBody: 10"), []wantErr{{7, "maxBody 10 is outside 1024..16777216"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
