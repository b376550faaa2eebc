package replay

import (
	"bytes"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoStart is the first instant of the demo traffic.
var demoStart = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// The demo's rule files: the rules in force, and a candidate that moves
// app-2 to a token bucket with a smaller burst, caps app-3 per second
// rather than per minute, and lowers the unknown callers' limit.
const (
	demoCurrentRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1000
        unit: 1m
      - api: /v1/user/{id}/orders
        method: [GET]
        limit: 100
        unit: 1m
  - appId: app-2
    limits:
      - api: /v1/order
        limit: 200
        unit: 1m
  - appId: app-3
    limits:
      - api: /v1/search
        limit: 600
        unit: 1m
  - appId: "*"
    limits:
      - api: /
        limit: 100
        unit: 1m
`
	demoCandidateRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 1000
        unit: 1m
      - api: /v1/user/{id}/orders
        method: [GET]
        limit: 100
        unit: 1m
  - appId: app-2
    limits:
      - api: /v1/order
        limit: 150
        unit: 1m
        algorithm: token_bucket
        burst: 60
  - appId: app-3
    limits:
      - api: /v1/search
        limit: 10
        unit: 1s
  - appId: "*"
    limits:
      - api: /
        limit: 60
        unit: 1m
`
)

// demoTraffic is half an hour of made-up production traffic: a web app
// (app-1) reading users and orders, a partner (app-2) placing orders with
// a batch every five minutes, a mobile app (app-3) searching with a rush
// between minutes 18 and 22, and unknown callers, one of them a scraper.
func demoTraffic() []genRequest {
	rng := rand.New(rand.NewPCG(7, 11))
	var reqs []genRequest
	poisson := func(rate float64) int {
		// Knuth's method; rates here are small.
		l, k, p := math.Exp(-rate), 0, 1.0
		for {
			p *= rng.Float64()
			if p <= l {
				return k
			}
			k++
		}
	}
	add := func(sec int, n int, app, ip, method, path string) {
		for i := 0; i < n; i++ {
			at := demoStart.Add(time.Duration(sec)*time.Second + time.Duration(rng.IntN(1000))*time.Millisecond)
			reqs = append(reqs, genRequest{at: at, app: app, ip: ip, method: method, path: path})
		}
	}
	for s := 0; s < 1800; s++ {
		m := float64(s) / 60
		add(s, poisson(6+2*math.Sin(m/5)), "app-1", "10.0.1.10", "GET", "/v1/user/"+strconv.Itoa(rng.IntN(5000)))
		add(s, poisson(1.2), "app-1", "10.0.1.10", "GET", "/v1/user/"+strconv.Itoa(rng.IntN(5000))+"/orders")
		add(s, poisson(1.5), "app-2", "10.0.2.20", "POST", "/v1/order")
		if s%300 == 10 {
			add(s, 150, "app-2", "10.0.2.20", "POST", "/v1/order")
		}
		rush := 0.0
		if m >= 18 && m < 22 {
			rush = 12 * math.Sin((m-18)/4*math.Pi)
		}
		add(s, poisson(4+rush), "app-3", "10.0.3.30", "GET", "/v1/search")
		add(s, poisson(2), "", "198.51.100."+strconv.Itoa(1+rng.IntN(60)), "GET", "/v1/public/item/"+strconv.Itoa(rng.IntN(100)))
		add(s, poisson(1.0), "", "203.0.113.66", "GET", "/v1/public/item/"+strconv.Itoa(rng.IntN(100)))
	}
	sortRequests(reqs)
	return reqs
}

func demoResult(t testing.TB, baseline bool) *Result {
	t.Helper()
	cfg := Config{Candidate: compileRules(t, "candidate.yaml", demoCandidateRules), ReorderWindow: 30 * time.Second}
	if baseline {
		cfg.Baseline = compileRules(t, "current.yaml", demoCurrentRules)
	}
	res, err := Run(cfg, Input{Name: "access.log", R: bytes.NewReader(accessLog(demoTraffic()))})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var (
	figureRE = regexp.MustCompile(`(?s)<figure class="chart"[^>]*data-app="([^"]*)" data-rule="([^"]*)">(.*?)</figure>`)
	seriesRE = regexp.MustCompile(`<path class="series [^"]*" data-series="([^"]*)" d="M[^"]+"`)
)

// TestReplayReportStructure checks the report's charts and series and
// that it is self-contained.
func TestReplayReportStructure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		baseline   bool
		wantSeries []string
	}{
		{name: "against a baseline", baseline: true, wantSeries: []string{seriesBaselineAdmitted, seriesBaselineLimited, seriesCandidateAdmitted, seriesCandidateLimited}},
		{name: "alone", wantSeries: []string{seriesCandidateAdmitted, seriesCandidateLimited}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := demoResult(t, tt.baseline)
			var buf bytes.Buffer
			if err := res.WriteReport(&buf); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			figures := figureRE.FindAllStringSubmatch(page, -1)
			if got, want := len(figures), 1+len(res.Groups); got != want {
				t.Fatalf("charts: got %d, want %d (all requests and one per group)", got, want)
			}
			for i, f := range figures {
				var got []string
				for _, m := range seriesRE.FindAllStringSubmatch(f[3], -1) {
					got = append(got, m[1])
				}
				if strings.Join(got, ",") != strings.Join(tt.wantSeries, ",") {
					t.Errorf("chart %d (%s %s): series %v, want %v", i, f[1], f[2], got, tt.wantSeries)
				}
			}
			for _, g := range res.Groups {
				if !strings.Contains(page, `data-app="`+g.App+`" data-rule="`+g.Rule+`"`) {
					t.Errorf("no chart for %s %s", g.App, g.Rule)
				}
			}
			for _, bad := range []string{"<script", "http://", "https://", " src=", "url(", "@import", "<link", "NaN", "Inf"} {
				if strings.Contains(page, bad) {
					t.Errorf("the report holds %q: it must be self-contained and finite", bad)
				}
			}
		})
	}
}

func TestNiceScale(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		max, top, ticks float64
	}{
		{"zero", 0, 1, 0.25},
		{"small", 3, 3, 1},
		{"round", 100, 100, 20},
		{"odd", 77, 80, 20},
		{"fractional", 0.3, 0.3, 0.1},
		{"large", 12345, 12500, 2500},
	}
	for _, tt := range tests {
		top, step := niceScale(tt.max)
		if math.Abs(top-tt.top) > 1e-9 || math.Abs(step-tt.ticks) > 1e-9 {
			t.Errorf("%s: niceScale(%v) = %v, %v; want %v, %v", tt.name, tt.max, top, step, tt.top, tt.ticks)
		}
	}
}

// TestReplayReportEmpty renders a replay of nothing but bad lines.
func TestReplayReportEmpty(t *testing.T) {
	t.Parallel()
	res, err := Run(Config{Candidate: compileRules(t, "candidate.yaml", demoCandidateRules), Baseline: compileRules(t, "current.yaml", demoCurrentRules)},
		Input{Name: "access.log", R: strings.NewReader("not a log\n")})
	if err != nil {
		t.Fatal(err)
	}
	var page, summary bytes.Buffer
	if err := res.WriteReport(&page); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteSummary(&summary); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"access.log:1: not JSON", `<figure class="chart" id="chart-all"`} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"NaN", "Inf"} {
		if strings.Contains(page.String(), bad) {
			t.Errorf("report holds %q", bad)
		}
	}
	if want := "Replayed 0 requests from 1 file"; !strings.HasPrefix(summary.String(), want) {
		t.Errorf("summary: got %q, want it to start with %q", summary.String(), want)
	}
}
