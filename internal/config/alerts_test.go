package config

import (
	"slices"
	"testing"
)

func TestAlerts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, data string
		want             [][]int // per rule of the first app
	}{
		{"rule", "rules.yaml", "configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 10, alerts: [100, 80, \"80%\"]}\n", [][]int{{80, 100}}},
		{"plan, and a rule's own wins", "rules.yaml", "plans:\n  - name: p\n    alerts: [90]\n    limits:\n      - {api: /c, limit: 10}\n      - {api: /d, limit: 10, alerts: [50]}\nconfigs:\n  - appId: a\n    plan: p\n", [][]int{{90}, {50}}},
		{"json", "rules.json", `{"configs": [{"appId": "a", "limits": [{"api": "/c", "limit": 10, "alerts": [75]}]}]}`, [][]int{{75}}},
		{"xml", "rules.xml", `<rules><config appId="a"><limit api="/c" limit="10" alerts="80 100"/></config></rules>`, [][]int{{80, 100}}},
	}
	t.Run("app total", func(t *testing.T) {
		r := mustParse(t, "rules.yaml", []byte("configs:\n  - appId: a\n    limit: 100\n    unit: 1h\n    alerts: [90]\n"))
		if got := r.Apps[0].TotalAlerts; !slices.Equal(got, []int{90}) {
			t.Errorf("total's alerts: got %v, want [90]", got)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, tc.file, []byte(tc.data))
			var got [][]int
			for _, l := range r.Apps[0].Limits {
				got = append(got, l.Alerts)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("alerts: got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAlertsErrors(t *testing.T) {
	t.Parallel()
	rule := func(alerts string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 100\n        alerts: " + alerts + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"zero", rule("[0]"), []wantErr{{6, `alert "0" is not a whole percentage`}}},
		{"over 100", rule("[120]"), []wantErr{{6, `alert "120" is not a whole percentage`}}},
		{"fraction", rule("[80.5]"), []wantErr{{6, `alert "80.5" is not a whole percentage`}}},
		{"mapping", rule("{at: 80}"), []wantErr{{6, "alerts must be a list of percentages"}}},
		{"empty", rule("[]"), []wantErr{{6, "alerts must be a list of percentages"}}},
		{"app without a total", "configs:\n  - appId: a\n    alerts: [80]\n    limits:\n      - {api: /c, limit: 1}\n", []wantErr{{3, "alerts on an app section applies to the app's total limit"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
