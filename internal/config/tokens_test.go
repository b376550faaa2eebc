package config

import "testing"

func TestBodyCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, data, want string
		need                   int64
	}{
		{"yaml path", "rules.yaml", "configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1000, cost: {body: usage.total_tokens}}\n",
			"body usage.total_tokens (min 1, max 1000)", 1},
		{"yaml list and reserve", "rules.yaml", "configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1000, cost: {body: [usage.input_tokens, usage.output_tokens], reserve: 200, max: 500}}\n",
			"body usage.input_tokens+usage.output_tokens (min 1, max 500, reserve 200)", 200},
		{"json reserve header", "rules.json", `{"configs": [{"appId": "a", "limits": [{"api": "/c", "limit": 1000, "cost": {"body": "usage.total_tokens", "reserveHeader": "x-max-tokens"}}]}]}`,
			"body usage.total_tokens (min 1, max 1000, reserve from X-Max-Tokens)", 1},
		{"xml", "rules.xml", `<rules><config appId="a"><limit api="/c" limit="1000"><cost body="usage.input_tokens,usage.output_tokens" reserve="5"/></limit></config></rules>`,
			"body usage.input_tokens+usage.output_tokens (min 1, max 1000, reserve 5)", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, tc.file, []byte(tc.data))
			c := r.Apps[0].Limits[0].Cost
			if got := c.String(); got != tc.want {
				t.Errorf("cost: got %q, want %q", got, tc.want)
			}
			if got := c.Need(); got != tc.need {
				t.Errorf("need: got %d, want %d", got, tc.need)
			}
		})
	}
}

func TestBodyCostErrors(t *testing.T) {
	t.Parallel()
	rule := func(cost string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 100\n        cost: " + cost + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"header and body", rule("{header: X-Cost, body: usage.total_tokens}"), []wantErr{{6, "cost sets both header and body"}}},
		{"empty field", rule("{body: usage..total}"), []wantErr{{6, "has an empty field"}}},
		{"reserve above max", rule("{body: usage.total_tokens, reserve: 200}"), []wantErr{{6, "cost reserve 200 is outside 0..100"}}},
		{"reserve without body", rule("{header: X-Cost, reserve: 5}"), []wantErr{{6, "cost reserve applies only to a cost read from the response body"}}},
		{"inspect too small", rule("{body: usage.total_tokens, inspect: 10}"), []wantErr{{6, "cost inspect 10 is outside 1024.."}}},
		{"body a number", rule("{body: 5}"), []wantErr{{6, "cost body must be a field path"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}

// TestReserveFor: a client's reserve header may raise the configured
// reserve up to max, never lower it.
func TestReserveFor(t *testing.T) {
	t.Parallel()
	c := Cost{Reserve: 500, ReserveHeader: "X-Token-Estimate", Min: 1, Max: 4000}
	tests := []struct {
		name string
		vals []string
		want int64
	}{
		{"no header", nil, 500},
		{"zero", []string{"0"}, 500},
		{"below the reserve", []string{"499"}, 500},
		{"above the reserve", []string{"800"}, 800},
		{"above max", []string{"5000"}, 4000},
		{"twenty digits", []string{"12345678901234567890"}, 4000},
		{"spaces", []string{" 900 "}, 900},
		{"not a number", []string{"-1"}, 500},
		{"empty", []string{""}, 500},
		{"sent twice", []string{"800", "900"}, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := c.ReserveFor(tc.vals); got != tc.want {
				t.Errorf("ReserveFor(%q): got %d, want %d", tc.vals, got, tc.want)
			}
		})
	}
	// Without a configured reserve the header is the reserve.
	none := c
	none.Reserve = 0
	if got := none.ReserveFor([]string{"0"}); got != 0 {
		t.Errorf("no reserve, header 0: got %d, want 0", got)
	}
	if got := none.ReserveFor([]string{"70"}); got != 70 {
		t.Errorf("no reserve, header 70: got %d, want 70", got)
	}
}

func TestReserveEstimate(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "rules.yaml", []byte("configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1000, cost: {body: usage.total_tokens, reserve: estimate, reserveHeader: X-Est}}\n"))
	c := r.Apps[0].Limits[0].Cost
	if !c.Estimate || c.Reserve != 0 || c.ReserveHeader != "X-Est" {
		t.Errorf("cost: got %+v, want an estimated reserve with its header", c)
	}
	if got, want := c.String(), "body usage.total_tokens (min 1, max 1000, reserve estimate, reserve from X-Est)"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}
	_, err := Parse("rules.yaml", []byte("configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1000, cost: {body: usage.total_tokens, reserve: guess}}\n"))
	checkErrors(t, err, []wantErr{{4, `cost reserve "guess" is neither a whole number of units nor estimate`}})
}
