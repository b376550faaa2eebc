package config

import (
	"fmt"
	"testing"
)

const plansYAML = `plans:
  - name: gold
    limits:
      - {api: /v1/chat, limit: 1000, unit: 60}
      - {api: /v1/search, limit: 100}
  - name: free
    limits:
      - {api: /v1/chat, limit: 10, unit: 60}
configs:
  - appId: acme
    plan: gold
    limits:
      - {api: /v1/search, limit: 500}
      - {api: /v1/admin, limit: 1}
  - appId: bob
    plan: free
  - appId: carol
    plan: gold
`

const plansJSON = `{"plans": [
  {"name": "gold", "limits": [
    {"api": "/v1/chat", "limit": 1000, "unit": 60},
    {"api": "/v1/search", "limit": 100}]},
  {"name": "free", "limits": [{"api": "/v1/chat", "limit": 10, "unit": 60}]}],
 "configs": [
  {"appId": "acme", "plan": "gold", "limits": [
    {"api": "/v1/search", "limit": 500},
    {"api": "/v1/admin", "limit": 1}]},
  {"appId": "bob", "plan": "free"},
  {"appId": "carol", "plan": "gold"}]}
`

const plansXML = `<rules>
  <plan name="gold">
    <limit api="/v1/chat" limit="1000" unit="60"/>
    <limit api="/v1/search" limit="100"/>
  </plan>
  <plan name="free">
    <limit api="/v1/chat" limit="10" unit="60"/>
  </plan>
  <config appId="acme" plan="gold">
    <limit api="/v1/search" limit="500"/>
    <limit api="/v1/admin" limit="1"/>
  </config>
  <config appId="bob" plan="free"/>
  <config appId="carol" plan="gold"/>
</rules>
`

// summary is one app's limits as "api limit plan" strings, in order.
func summary(a App) []string {
	var s []string
	for _, r := range a.Limits {
		s = append(s, fmt.Sprintf("%s %d %q", r.API, r.Params.Limit, r.Plan))
	}
	return s
}

func TestPlans(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		// acme's own /v1/search replaces gold's; gold's /v1/chat is added.
		"acme":  {`/v1/search 500 ""`, `/v1/admin 1 ""`, `/v1/chat 1000 "gold"`},
		"bob":   {`/v1/chat 10 "free"`},
		"carol": {`/v1/chat 1000 "gold"`, `/v1/search 100 "gold"`},
	}
	plans := map[string]string{"acme": "gold", "bob": "free", "carol": "gold"}
	for _, tc := range []struct{ name, file, data string }{
		{"yaml", "rules.yaml", plansYAML},
		{"json", "rules.json", plansJSON},
		{"xml", "rules.xml", plansXML},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, tc.file, []byte(tc.data))
			if len(r.Apps) != 3 {
				t.Fatalf("apps: got %d, want 3", len(r.Apps))
			}
			for _, a := range r.Apps {
				if a.Plan != plans[a.ID] {
					t.Errorf("%s plan: got %q, want %q", a.ID, a.Plan, plans[a.ID])
				}
				got, w := summary(a), want[a.ID]
				if fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("%s limits: got %v, want %v", a.ID, got, w)
				}
			}
		})
	}
}

func TestPlanOverrideByMethod(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", []byte(`plans:
  - name: p
    limits:
      - {api: /v1/items, method: GET, limit: 100}
      - {api: /v1/items, method: POST, limit: 10}
configs:
  - appId: a
    plan: p
    limits:
      - {api: /v1/items, method: POST, limit: 1}
`))
	got := summary(r.Apps[0])
	want := []string{`/v1/items 1 ""`, `/v1/items 100 "p"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limits: got %v, want %v", got, want)
	}
	if m := r.Apps[0].Limits[1].Methods; fmt.Sprint(m) != "[GET]" {
		t.Errorf("plan rule methods: got %v, want [GET]", m)
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		data string
		want []wantErr
	}{
		{
			name: "unknown plan",
			data: "plans:\n  - name: gold\n    limits: [{api: /a, limit: 1}]\nconfigs:\n  - appId: a\n    plan: silver\n",
			want: []wantErr{{6, `plan "silver" is not defined; use one of: gold`}},
		},
		{
			name: "no plans at all",
			data: "configs:\n  - appId: a\n    plan: gold\n",
			want: []wantErr{{3, `plan "gold" is not defined: the rule file has no plans`}},
		},
		{
			name: "duplicate plan",
			data: "plans:\n  - name: gold\n    limits: [{api: /a, limit: 1}]\n  - name: gold\n    limits: [{api: /b, limit: 1}]\nconfigs:\n  - {appId: a, plan: gold}\n",
			want: []wantErr{{4, `plan "gold" is already defined at line 2`}},
		},
		{
			name: "plan without name",
			data: "plans:\n  - limits: [{api: /a, limit: 1}]\nconfigs:\n  - {appId: a, limit: 1}\n",
			want: []wantErr{{2, "this plan has no name"}},
		},
		{
			name: "plan without limits",
			data: "plans:\n  - name: gold\nconfigs:\n  - {appId: a, limit: 1}\n",
			want: []wantErr{{2, "this plan has no limits"}},
		},
		{
			name: "plans not a list",
			data: "plans: {gold: []}\nconfigs:\n  - {appId: a, limit: 1}\n",
			want: []wantErr{{1, "plans must be a list of plans"}},
		},
		{
			name: "bad rule in plan",
			data: "plans:\n  - name: gold\n    limits:\n      - {api: /a, limit: -5}\nconfigs:\n  - {appId: a, plan: gold}\n",
			want: []wantErr{{4, "limit -5 is below -1"}},
		},
		{
			name: "unknown field in plan",
			data: "plans:\n  - name: gold\n    limit: 5\n    limits: [{api: /a, limit: 1}]\nconfigs:\n  - {appId: a, plan: gold}\n",
			want: []wantErr{{3, `unknown field "limit" in this plan (did you mean "limits"?)`}},
		},
		{
			name: "partial overlap is not an override",
			data: "plans:\n  - name: gold\n    limits:\n      - {api: /a, method: [GET, POST], limit: 10}\nconfigs:\n  - appId: a\n    plan: gold\n    limits:\n      - {api: /a, method: GET, limit: 1}\n",
			want: []wantErr{{7, `plan "gold"'s rule /a at line 4 limits some of the same requests as this app's rule at line 9`}},
		},
		{
			name: "xml unknown plan",
			file: "rules.xml",
			data: "<rules>\n  <plan name=\"gold\"><limit api=\"/a\" limit=\"1\"/></plan>\n  <config appId=\"a\" plan=\"iron\"/>\n</rules>\n",
			want: []wantErr{{3, `plan "iron" is not defined; use one of: gold`}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := tc.file
			if file == "" {
				file = "rules.yaml"
			}
			_, err := Parse(file, []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
