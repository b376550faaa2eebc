package config

import (
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// TestConcurrency checks the shapes of concurrency: on a rule alone or
// beside a limit, on an app section, in each format.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, file, data string }{
		{name: "yaml", file: "rules.yaml", data: `
configs:
  - appId: app-1
    concurrency: 20
    limits:
      - api: /v1/upload
        concurrency: 2
      - api: /v1/user
        limit: 10
        concurrency: 5
`},
		{name: "json", file: "rules.json", data: `{"configs": [{"appId": "app-1", "concurrency": 20, "limits": [
  {"api": "/v1/upload", "concurrency": 2},
  {"api": "/v1/user", "limit": 10, "concurrency": 5}]}]}`},
		{name: "xml", file: "rules.xml", data: `<rules>
  <config appId="app-1" concurrency="20">
    <limit api="/v1/upload" concurrency="2"/>
    <limit api="/v1/user" limit="10" concurrency="5"/>
  </config>
</rules>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.file, []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			app := r.Apps[0]
			if app.Concurrency != 20 || app.Total != nil {
				t.Errorf("app: got concurrency %d total %v, want 20 and no total", app.Concurrency, app.Total)
			}
			up, user := app.Limits[0], app.Limits[1]
			if up.Concurrency != 2 || up.Params.Limit != limit.Unlimited {
				t.Errorf("%s: got concurrency %d limit %d, want 2 and no rate (-1)", up.API, up.Concurrency, up.Params.Limit)
			}
			if user.Concurrency != 5 || user.Params.Limit != 10 {
				t.Errorf("%s: got concurrency %d limit %d, want 5 and 10", user.API, user.Concurrency, user.Params.Limit)
			}
		})
	}
}

func TestConcurrencyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data string
		want       []wantErr
	}{
		{name: "zero", data: `
configs:
  - appId: a
    limits:
      - api: /x
        concurrency: 0
`, want: []wantErr{{6, "concurrency 0 is outside 1..1000000"}}},
		{name: "not a number", data: `
configs:
  - appId: a
    concurrency: lots
`, want: []wantErr{{4, "concurrency must be a whole number"}}},
		{name: "shadow", data: `
configs:
  - appId: a
    limits:
      - api: /x
        shadow: true
        concurrency: 3
`, want: []wantErr{{7, "concurrency cannot be set on a shadow rule"}}},
		{name: "a rate setting without a limit", data: `
configs:
  - appId: a
    limits:
      - api: /x
        unit: 1m
        concurrency: 3
`, want: []wantErr{{6, "unit applies to a rule's limit, but this rule sets only concurrency"}}},
		{name: "neither", data: `
configs:
  - appId: a
    limits:
      - api: /x
`, want: []wantErr{{5, "or concurrency to cap the requests in flight"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.data))
			checkErrors(t, err, tt.want)
		})
	}
}
