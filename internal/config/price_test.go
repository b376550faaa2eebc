package config

import (
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/usage"
)

func TestPricedCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, data, want string
		model                  string
		price                  usage.Price
	}{
		{"yaml mapping", "rules.yaml", "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 5000000\n        cost:\n          price:\n            gpt-4o: {input: 2.50, output: 10}\n            gpt-4o-mini*: {input: 0.15, output: 0.6}\n            \"*\": {input: 15, output: 60}\n          reserve: estimate\n",
			"price of 3 models in micro-units (min 1, max 5000000, reserve estimate)", "gpt-4o-mini-2024-07-18", usage.Price{Input: 150_000, Output: 600_000}},
		{"json", "rules.json", `{"configs": [{"appId": "a", "limits": [{"api": "/c", "limit": 1000000, "cost": {"price": {"claude-sonnet-4-5": {"input": 3, "output": 15}}}}]}]}`,
			"price of 1 model in micro-units (min 1, max 1000000)", "claude-sonnet-4-5", usage.Price{Input: 3_000_000, Output: 15_000_000}},
		{"yaml list", "rules.yaml", "configs:\n  - appId: a\n    limits:\n      - {api: /c, limit: 1000, cost: {price: [{model: o3, input: \"2\", output: 8.000001}]}}\n",
			"price of 1 model in micro-units (min 1, max 1000)", "o3", usage.Price{Input: 2_000_000, Output: 8_000_001}},
		{"xml", "rules.xml", `<rules><config appId="a"><limit api="/c" limit="1000"><cost reserve="10"><price model="gpt-4o" input="2.50" output="10"/><price model="*" input="0" output="0.000001"/></cost></limit></config></rules>`,
			"price of 2 models in micro-units (min 1, max 1000, reserve 10)", "anything", usage.Price{Input: 0, Output: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := mustParse(t, tc.file, []byte(tc.data))
			c := r.Apps[0].Limits[0].Cost
			if got := c.String(); got != tc.want {
				t.Errorf("cost: got %q, want %q", got, tc.want)
			}
			if len(c.Body) == 0 || c.Price == nil {
				t.Fatalf("cost: body %v price %v, want the priced paths and a price table", c.Body, c.Price)
			}
			if got, ok := c.Price.Resolve("", tc.model); !ok || got != tc.price {
				t.Errorf("price of %s: got %v %v, want %v", tc.model, got, ok, tc.price)
			}
		})
	}
}

func TestPricedCostErrors(t *testing.T) {
	t.Parallel()
	rule := func(cost string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /c\n        limit: 100\n        cost: " + cost + "\n"
	}
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{"price and body", rule("{body: usage.total_tokens, price: {m: {input: 1, output: 1}}}"), []wantErr{{6, "cost sets price with header or body"}}},
		{"price a list of numbers", rule("{price: 5}"), []wantErr{{6, "cost price must be a mapping of models"}}},
		{"no output", rule("{price: {m: {input: 1}}}"), []wantErr{{6, `the price of "m" has no output`}}},
		{"seven decimals", rule("{price: {m: {input: 0.0000001, output: 1}}}"), []wantErr{{6, `the input price of "m": "0.0000001" has more than six decimals`}}},
		{"negative", rule("{price: {m: {input: -1, output: 1}}}"), []wantErr{{6, `the input price of "m"`}}},
		{"unknown field", rule("{price: {m: {input: 1, output: 1, cached: 1}}}"), []wantErr{{6, "cached"}}},
		{"star inside", rule("{price: {\"gpt*4o\": {input: 1, output: 1}}}"), []wantErr{{6, "has a * before its end"}}},
		{"empty", rule("{price: {}}"), []wantErr{{6, "cost price names no model"}}},
		{"price not a mapping", rule("{price: {m: 5}}"), []wantErr{{6, `the price of "m" must be a mapping`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tc.data))
			checkErrors(t, err, tc.want)
		})
	}
}
