package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestCostAndCount reads cost and count in YAML, JSON and XML into the
// same rules.
func TestCostAndCount(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"rules.yaml": `
configs:
  - appId: a
    limit: 10000
    cost: 2
    limits:
      - api: /v1/chat
        limit: 1000
        cost: 100
      - api: /v1/complete
        limit: 100000
        unit: 1m
        cost: {header: x-ratelimit-cost, max: 8000, min: 10, keep: true}
      - api: /login
        limit: 5
        unit: 15m
        lockSeconds: 900
        count: {status: [401, 403, "5xx", "420-429"]}
      - api: /upload
        limit: 50
        cost: {header: X-Cost}
        count: {status: 200}
`,
		"rules.json": `{"configs": [{"appId": "a", "limit": 10000, "cost": 2, "limits": [
  {"api": "/v1/chat", "limit": 1000, "cost": 100},
  {"api": "/v1/complete", "limit": 100000, "unit": "1m",
   "cost": {"header": "x-ratelimit-cost", "max": 8000, "min": 10, "keep": true}},
  {"api": "/login", "limit": 5, "unit": "15m", "lockSeconds": 900,
   "count": {"status": [401, 403, "5xx", "420-429"]}},
  {"api": "/upload", "limit": 50, "cost": {"header": "X-Cost"}, "count": {"status": 200}}
]}]}`,
		"rules.xml": `<rules><config appId="a" limit="10000" cost="2">
  <limit api="/v1/chat" limit="1000" cost="100"/>
  <limit api="/v1/complete" limit="100000" unit="1m">
    <cost header="x-ratelimit-cost" max="8000" min="10" keep="true"/>
  </limit>
  <limit api="/login" limit="5" unit="15m" lockSeconds="900">
    <count><status>401</status><status>403</status><status>5xx</status><status>420-429</status></count>
  </limit>
  <limit api="/upload" limit="50"><cost header="X-Cost"/><count status="200"/></limit>
</config></rules>`,
	}
	type got struct {
		TotalCost  string
		TotalCount *Count
		Costs      []string
		Counts     []string
	}
	want := got{
		TotalCost: "2",
		Costs:     []string{"100", "header X-Ratelimit-Cost (min 10, max 8000, kept)", "1", "header X-Cost (min 1, max 50)"},
		Counts:    []string{"", "", "401,403,5xx,420-429", "200"},
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			r := mustParse(t, name, []byte(data))
			a := r.Apps[0]
			g := got{TotalCost: a.TotalCost.String(), TotalCount: a.TotalCount}
			for _, rule := range a.Limits {
				g.Costs = append(g.Costs, rule.Cost.String())
				g.Counts = append(g.Counts, rule.Count.String())
			}
			if !reflect.DeepEqual(g, want) {
				t.Errorf("got %+v, want %+v", g, want)
			}
			login := a.Limits[2].Count
			for code, match := range map[int]bool{401: true, 403: true, 500: true, 599: true, 425: true, 200: false, 404: false, 430: false} {
				if login.Matches(code) != match {
					t.Errorf("count %s matches %d: got %v, want %v", login, code, !match, match)
				}
			}
		})
	}
}

// TestCostErrors checks that each wrong cost or count is reported on its
// line, in YAML, and in JSON and XML for a few.
func TestCostErrors(t *testing.T) {
	t.Parallel()
	yaml := func(rule string) string {
		return "configs:\n  - appId: a\n    limits:\n      - api: /x\n        limit: 100\n" + rule
	}
	tests := []struct {
		name, file, data string
		line             int
		msg              string
	}{
		{"cost zero", "r.yaml", yaml("        cost: 0\n"), 6, "cost 0 is below 1"},
		{"cost above limit", "r.yaml", yaml("        cost: 101\n"), 6, "cost 101 is above the limit's capacity 100"},
		{"cost above burst", "r.yaml", yaml("        algorithm: token_bucket\n        burst: 10\n        cost: 11\n"), 8, "cost 11 is above the limit's capacity 10"},
		{"cost fraction", "r.yaml", yaml("        cost: 1.5\n"), 6, "cost must be a whole number"},
		{"cost string", "r.yaml", yaml("        cost: lots\n"), 6, "cost must be a whole number of units ≥ 1, or a mapping"},
		{"cost list", "r.yaml", yaml("        cost: [1]\n"), 6, "cost must be a whole number of units ≥ 1, or a mapping"},
		{"cost no header", "r.yaml", yaml("        cost: {max: 5}\n"), 6, "cost has no header"},
		{"cost bad header", "r.yaml", yaml("        cost:\n          header: \"X Cost\"\n"), 7, "cost header \"X Cost\" is not a valid header name"},
		{"cost unknown field", "r.yaml", yaml("        cost:\n          header: X-Cost\n          maximum: 5\n"), 8, "unknown field \"maximum\" in cost"},
		{"cost min zero", "r.yaml", yaml("        cost:\n          header: X-Cost\n          min: 0\n"), 8, "cost min 0 is below 1"},
		{"cost min above capacity", "r.yaml", yaml("        cost:\n          header: X-Cost\n          min: 101\n"), 8, "cost min 101 is above the limit's capacity 100"},
		{"cost max zero", "r.yaml", yaml("        cost:\n          header: X-Cost\n          max: 0\n"), 8, "cost max 0 is outside 1.."},
		{"cost min above max", "r.yaml", yaml("        cost:\n          header: X-Cost\n          max: 5\n          min: 6\n"), 9, "cost min 6 is above cost max 5"},
		{"cost keep", "r.yaml", yaml("        cost:\n          header: X-Cost\n          keep: yes please\n"), 8, "keep must be true or false"},
		{"count scalar", "r.yaml", yaml("        count: 401\n"), 6, "count must be a mapping like"},
		{"count no status", "r.yaml", yaml("        count: {}\n"), 6, "count has no status"},
		{"count empty", "r.yaml", yaml("        count: {status: []}\n"), 6, "count status is an empty list"},
		{"count bad status", "r.yaml", yaml("        count:\n          status:\n            - 401\n            - 99\n"), 9, "count status the number 99 is not a status"},
		{"count bad class", "r.yaml", yaml("        count: {status: [\"6xx\"]}\n"), 6, "count status the string \"6xx\" is not a status"},
		{"count reversed range", "r.yaml", yaml("        count: {status: [\"499-400\"]}\n"), 6, "count status the string \"499-400\" is a range that ends before it starts"},
		{"count unknown field", "r.yaml", yaml("        count: {statuses: [401]}\n"), 6, "unknown field \"statuses\" in count"},
		{"cost in defaults", "r.yaml", "defaults:\n  cost: 5\nconfigs:\n  - appId: a\n    limit: 1\n", 2, "unknown field \"cost\" in defaults"},
		{"cost without total", "r.yaml", "configs:\n  - appId: a\n    cost: 5\n    limits:\n      - api: /x\n        limit: 1\n", 3, "cost on an app section applies to the app's total limit"},
		{"json cost", "r.json", "{\"configs\": [{\"appId\": \"a\", \"limits\": [\n{\"api\": \"/x\", \"limit\": 100,\n \"cost\": 101}]}]}", 3, "cost 101 is above the limit's capacity 100"},
		{"json status", "r.json", "{\"configs\": [{\"appId\": \"a\", \"limits\": [\n{\"api\": \"/x\", \"limit\": 100,\n \"count\": {\"status\": [\n 401, true]}}]}]}", 4, "count status true is not a status"},
		{"xml cost attribute", "r.xml", "<rules><config appId=\"a\">\n<limit api=\"/x\" limit=\"100\"\n cost=\"0\"/></config></rules>", 3, "cost 0 is below 1"},
		{"xml cost element", "r.xml", "<rules><config appId=\"a\">\n<limit api=\"/x\" limit=\"100\">\n<cost header=\"X-Cost\"\n max=\"x\"/></limit></config></rules>", 4, "max must be a whole number"},
		{"xml status", "r.xml", "<rules><config appId=\"a\">\n<limit api=\"/x\" limit=\"100\">\n<count>\n<status>40x</status></count></limit></config></rules>", 4, "count status the string \"40x\" is not a status"},
		{"xml count element", "r.xml", "<rules><config appId=\"a\">\n<limit api=\"/x\" limit=\"100\">\n<count>\n<code>401</code></count></limit></config></rules>", 4, "unknown element <code> in <count>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.file, []byte(tt.data))
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("got %v, want an error on line %d", err, tt.line)
			}
			var all []string
			for _, e := range errs {
				all = append(all, strconv.Itoa(e.Line)+": "+e.Msg)
				if e.Line == tt.line && strings.Contains(e.Msg, tt.msg) {
					return
				}
			}
			t.Errorf("got\n%s\nwant on line %d: %s", strings.Join(all, "\n"), tt.line, tt.msg)
		})
	}
}
