package replay

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

func replayBytes(t *testing.T, cfg Config, logs ...[]byte) *Result {
	t.Helper()
	var inputs []Input
	for i, l := range logs {
		inputs = append(inputs, Input{Name: fmt.Sprintf("access-%d.log", i+1), R: bytes.NewReader(l)})
	}
	res, err := Run(cfg, inputs...)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return res
}

func groupOf(t *testing.T, res *Result, app, rule string) *Group {
	t.Helper()
	for _, g := range res.Groups {
		if g.App == app && g.Rule == rule {
			return g
		}
	}
	t.Fatalf("no group %s %s", app, rule)
	return nil
}

// TestReplayKnownPattern replays ten minutes of the burst pattern under
// each rule file, alone and against the other, and checks the exact
// counts the fixed windows give.
func TestReplayKnownPattern(t *testing.T) {
	t.Parallel()
	log := accessLog(burstPattern(10))
	current := compileRules(t, "current.yaml", currentRules)
	candidate := compileRules(t, "candidate.yaml", candidateRules)

	// Per minute: app-2 sends 150 + 59 = 209 orders, app-1 120 user
	// requests, and each of three unknown callers 30 requests.
	type counts struct{ requests, limited int64 }
	underCurrent := map[string]counts{
		"app-2 /v1/order": {2090, 90},  // 200 a minute pass: the last 9 steady ones are limited
		"app-1 /v1/user":  {1200, 0},   // 120 a minute, under 1000
		"* /":             {900, 300},  // 20 of each caller's 30 pass
		"total":           {4190, 390}, //
	}
	underCandidate := map[string]counts{
		"app-2 /v1/order": {2090, 1090}, // 100 of the burst pass: 50 of it and all 59 steady are limited
		"app-1 /v1/user":  {1200, 200},  // 100 a minute: 20 limited
		"* /":             {900, 0},     // 40 a minute: none
		"total":           {4190, 1290},
	}
	tests := []struct {
		name       string
		cand, base *ruleset.Set
		wantCand   map[string]counts
		wantBase   map[string]counts
	}{
		{name: "current alone", cand: current, wantCand: underCurrent},
		{name: "candidate alone", cand: candidate, wantCand: underCandidate},
		{name: "candidate against current", cand: candidate, base: current, wantCand: underCandidate, wantBase: underCurrent},
		{name: "current against candidate", cand: current, base: candidate, wantCand: underCurrent, wantBase: underCandidate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := replayBytes(t, Config{Candidate: tt.cand, Baseline: tt.base}, log)
			if res.Requests != 4190 || res.Malformed != 0 || res.Late != 0 {
				t.Fatalf("requests %d, malformed %d, late %d: want 4190, 0, 0", res.Requests, res.Malformed, res.Late)
			}
			check := func(which string, want map[string]counts, get func(*Group) Counts) {
				t.Helper()
				for name, w := range want {
					g := &res.Total
					if name != "total" {
						app, rule, _ := strings.Cut(name, " ")
						g = groupOf(t, res, app, rule)
					}
					c := get(g)
					if c.Requests != w.requests || c.Limited != w.limited || c.Admitted != w.requests-w.limited {
						t.Errorf("%s %s: got %d requests, %d admitted, %d limited; want %d, %d, %d",
							which, name, c.Requests, c.Admitted, c.Limited, w.requests, w.requests-w.limited, w.limited)
					}
				}
			}
			check("candidate", tt.wantCand, func(g *Group) Counts { return g.Candidate })
			if tt.base != nil {
				check("baseline", tt.wantBase, func(g *Group) Counts { return g.Baseline })
			}
			if got := len(res.Groups); got != 3 {
				t.Errorf("groups: got %d, want 3", got)
			}
			// The series add up to the totals, per second.
			var adm, lim int64
			for _, b := range res.Total.Series {
				adm += b.CandidateAdmitted
				lim += b.CandidateLimited
			}
			if adm != res.Total.Candidate.Admitted || lim != res.Total.Candidate.Limited {
				t.Errorf("series: %d admitted, %d limited; want %d, %d", adm, lim, res.Total.Candidate.Admitted, res.Total.Candidate.Limited)
			}
			if got, want := len(res.Total.Series), 600; got != want || res.Step != time.Second {
				t.Errorf("series: %d buckets of %v, want %d of 1s", got, res.Step, want)
			}
		})
	}

	t.Run("callers", func(t *testing.T) {
		t.Parallel()
		res := replayBytes(t, Config{Candidate: candidate, Baseline: current}, log)
		var got []string
		for _, c := range res.Callers {
			got = append(got, fmt.Sprintf("%s %d→%d", c.Name(), c.Baseline.Limited, c.Candidate.Limited))
		}
		// Newly limited first, then no longer limited, then the rest.
		want := []string{"app-1 0→200", "2001:db8::3 100→0", "203.0.113.1 100→0", "203.0.113.2 100→0", "app-2 90→1090"}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("callers:\n got %v\nwant %v", got, want)
		}
		// The burst minute by minute: the candidate limits 50 of the 150
		// in the first second of every minute.
		g := groupOf(t, res, "app-2", "/v1/order")
		for m := 0; m < 10; m++ {
			if b := g.Series[m*60]; b.CandidateAdmitted != 100 || b.CandidateLimited != 50 || b.BaselineAdmitted != 150 || b.BaselineLimited != 0 {
				t.Errorf("minute %d, second 0: got %+v, want 100/50 candidate, 150/0 baseline", m, b)
			}
		}
	})
}

// liveRules and liveBaselineRules exercise every algorithm, app totals,
// methods, shadow rules, lockouts and per-IP unknown callers.
const (
	liveRules = `
configs:
  - appId: app-1
    limit: 40
    unit: 10s
    limits:
      - api: /v1/user
        limit: 12
        unit: 5s
      - api: /v1/user/{id}/orders
        method: [GET]
        limit: 3
        unit: 2s
        algorithm: token_bucket
        burst: 4
      - api: /v1/order
        limit: 5
        unit: 3s
        algorithm: sliding_log
      - api: /v1/login
        limit: 2
        unit: 1s
        algorithm: fixed_window
        lockSeconds: 4
      - api: /v1/beta
        limit: 1
        unit: 1s
        shadow: true
  - appId: app-2
    limits:
      - api: /
        limit: 6
        unit: 2s
        algorithm: leaky_bucket
        burst: 3
      - api: /v1/slow
        limit: 2
        unit: 3s
        algorithm: token_bucket
        warmup: 10s
  - appId: "*"
    limits:
      - api: /
        limit: 4
        unit: 2s
        precision: 4
`
	liveBaselineRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: 20
        unit: 5s
      - api: /v1/order
        limit: 3
        unit: 1s
        algorithm: fixed_window
  - appId: app-3
    limit: 5
    unit: 2s
  - appId: "*"
    by: global
    limits:
      - api: /
        limit: 10
        unit: 1s
`
)

// TestReplayMatchesLiveHandler sends the same random requests at the same
// instants through live handlers under two rule files, logging the first
// run with the real access log, then replays that log with the first rules
// as candidate and the second as baseline: every request must get the
// decision the live handler gave it, and the totals must agree.
func TestReplayMatchesLiveHandler(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	apps := []string{"app-1", "app-1", "app-1", "app-2", "app-2", "app-3", "", "", "no-such-app", "bad id!"}
	paths := []string{
		"/v1/user/42", "/v1//user/7/orders", "/v1/user/7/orders", "/v1/order", "/v1/./login", "/v1/beta/x",
		"/v1/slow", "/anything", "/static/a%20b.js", "/v1/user;jsessionid=1/9", "/v1/user/%2Fetc", "/V1/USER",
		"/v1/%C3%A9t%C3%A9", "/v1/q%22uote",
	}
	ips := []string{"203.0.113.1", "203.0.113.2", "2001:db8::7", "198.51.100.9"}
	type req struct {
		at                     time.Time
		method, path, app, ip  string
		liveCand, liveBaseline observe.Decision
	}
	var reqs []req
	at := t0
	for i := 0; i < 3000; i++ {
		at = at.Add(time.Duration(rng.IntN(120)) * time.Millisecond) // ms-aligned: the log's precision
		if rng.IntN(200) == 0 {
			at = at.Add(7 * time.Second) // a quiet spell
		}
		method := "GET"
		if rng.IntN(4) == 0 {
			method = "POST"
		}
		reqs = append(reqs, req{at: at, method: method, path: paths[rng.IntN(len(paths))], app: apps[rng.IntN(len(apps))], ip: ips[rng.IntN(len(ips))]})
	}

	var logBuf bytes.Buffer
	run := func(rules string, log bool, set func(*req, observe.Decision)) {
		var w io.Writer
		if log {
			w = &logBuf
		}
		g := newLiveGateway(t, rules, w)
		for i := range reqs {
			q := &reqs[i]
			g.now = q.at
			r := httptest.NewRequest(q.method, q.path, nil)
			r.RemoteAddr = q.ip + ":4242"
			if strings.Contains(q.ip, ":") {
				r.RemoteAddr = "[" + q.ip + "]:4242"
			}
			if q.app != "" {
				r.Header.Set("X-App-Id", q.app)
			}
			g.h.ServeHTTP(httptest.NewRecorder(), r)
			set(q, g.last)
		}
	}
	run(liveRules, true, func(q *req, d observe.Decision) { q.liveCand = d })
	run(liveBaselineRules, false, func(q *req, d observe.Decision) { q.liveBaseline = d })

	type tally struct{ limited, admitted, invalid int64 }
	count := func(t *tally, d observe.Decision) {
		switch d {
		case observe.DecisionLimited:
			t.limited++
		case observe.DecisionInvalid:
			t.invalid++
		default:
			t.admitted++
		}
	}
	var liveCand, liveBase, replayCand, replayBase tally
	for _, q := range reqs {
		count(&liveCand, q.liveCand)
		count(&liveBase, q.liveBaseline)
	}
	if liveCand.limited < 100 || liveCand.invalid == 0 || liveBase.limited < 100 {
		t.Fatalf("the traffic should exercise the limits: live %+v, baseline %+v", liveCand, liveBase)
	}

	seen := 0
	res := replayBytes(t, Config{
		Candidate: compileRules(t, "live.yaml", liveRules),
		Baseline:  compileRules(t, "baseline.yaml", liveBaselineRules),
		OnRequest: func(rr Request) {
			seen++
			q := reqs[rr.Line-1]
			if !rr.Time.Equal(q.at) || rr.Candidate != q.liveCand || rr.Baseline != q.liveBaseline {
				t.Errorf("line %d (%s %s app %q at t0+%v): replay %s/%s at t0+%v, live %s/%s",
					rr.Line, q.method, q.path, q.app, q.at.Sub(t0), rr.Candidate, rr.Baseline, rr.Time.Sub(t0), q.liveCand, q.liveBaseline)
			}
			count(&replayCand, rr.Candidate)
			count(&replayBase, rr.Baseline)
		},
	}, logBuf.Bytes())
	if seen != len(reqs) {
		t.Errorf("replayed %d requests, want %d", seen, len(reqs))
	}
	if replayCand != liveCand || replayBase != liveBase {
		t.Errorf("totals: replay %+v / %+v, live %+v / %+v", replayCand, replayBase, liveCand, liveBase)
	}
	if res.Invalid != liveCand.invalid || res.Total.Candidate.Limited != liveCand.limited || res.Total.Baseline.Limited != liveBase.limited ||
		res.Total.Candidate.Admitted != liveCand.admitted || res.Malformed != 0 {
		t.Errorf("result: %d invalid, %+v / %+v, %d malformed; live %+v / %+v", res.Invalid, res.Total.Candidate, res.Total.Baseline, res.Malformed, liveCand, liveBase)
	}
}

func TestReplayMalformedLines(t *testing.T) {
	t.Parallel()
	good := `{"time":"2026-11-21T12:00:00.123Z","msg":"access","app_id":"app-1","method":"GET","path":"/v1/user","client_ip":"203.0.113.7","decision":"allowed"}`
	tests := []struct {
		name string
		line string
		want string // "" for a replayed line, "other", "invalid", "blank", or the problem
	}{
		{name: "good", line: good},
		{name: "good with escapes", line: `{"time":"2026-11-21T12:00:00.123Z","msg":"access","app_id":"app-1","method":"GET","path":"/v1/\u00e9t\u00e9/\"q\"","client_ip":"203.0.113.7"}`},
		{name: "good with nested values", line: `{"time":"2026-11-21T12:00:00Z","msg":"access","extra":{"a":[1,2]},"app_id":"","method":"GET","path":"/","client_ip":""}`},
		{name: "good with an offset", line: `{"time":"2026-11-21T20:00:00.5+08:00","msg":"access","app_id":"","method":"GET","path":"/","client_ip":"::1"}`},
		{name: "blank", line: "   \t", want: "blank"},
		{name: "another log", line: `{"time":"2026-11-21T12:00:00Z","level":"INFO","msg":"gateway listening","proxy":":8080"}`, want: "other"},
		{name: "logged invalid", line: `{"time":"2026-11-21T12:00:00Z","msg":"access","app":"*","app_id":"","rule":"","method":"GET","path":"","client_ip":"","decision":"invalid","status":400}`, want: "invalid"},
		{name: "not JSON", line: `{"time": nope}`, want: "not JSON: invalid character 'o' in literal null (expecting 'u')"},
		{name: "truncated", line: good[:40], want: "not JSON: unexpected end of JSON input"},
		{name: "trailing garbage", line: good + "x", want: "not JSON: invalid character 'x' after top-level value"},
		{name: "not an object", line: `["time"]`, want: "not a JSON object"},
		{name: "null", line: `null`, want: "not a JSON object"},
		{name: "missing time", line: strings.Replace(good, `"time"`, `"tim"`, 1), want: `missing "time"`},
		{name: "missing several", line: `{"msg":"access","method":"GET"}`, want: `missing "time", "app_id", "path", "client_ip"`},
		{name: "time not a string", line: strings.Replace(good, `"2026-11-21T12:00:00.123Z"`, `1763726400`, 1), want: `"time" not a string`},
		{name: "bad timestamp", line: strings.Replace(good, `2026-11-21T12:00:00.123Z`, `21/Nov/2026:12:00:00`, 1), want: `time "21/Nov/2026:12:00:00" is not an RFC 3339 timestamp`},
		{name: "no zone", line: strings.Replace(good, `12:00:00.123Z`, `12:00:00.123`, 1), want: `time "2026-11-21T12:00:00.123" is not an RFC 3339 timestamp`},
		{name: "empty method", line: strings.Replace(good, `"GET"`, `""`, 1), want: "method is empty"},
		{name: "relative path", line: strings.Replace(good, `"/v1/user"`, `"v1/user"`, 1), want: `path "v1/user" does not start with a slash`},
		{name: "bad app ID", line: strings.Replace(good, `"app-1"`, `"app 1"`, 1), want: `app_id "app 1": may contain only letters, digits and . _ : -`},
		{name: "bad client IP", line: strings.Replace(good, `"203.0.113.7"`, `"203.0.113"`, 1), want: `client_ip "203.0.113" is not an IP address`},
		{name: "path the gateway rejects", line: strings.Replace(good, `"/v1/user"`, `"/v1/a\\b"`, 1), want: `the gateway rejects this request as invalid (path "/v1/a\\b")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The line between two good ones, so that line numbers count.
			log := good + "\n" + tt.line + "\n" + good + "\n"
			res := replayBytes(t, Config{Candidate: compileRules(t, "rules.yaml", basicRules)}, []byte(log))
			wantRequests := int64(2)
			var wantMalformed []LineProblem
			switch tt.want {
			case "":
				wantRequests = 3
			case "other":
				if res.Other != 1 {
					t.Errorf("other: got %d, want 1", res.Other)
				}
			case "invalid":
				if res.Invalid != 1 {
					t.Errorf("invalid: got %d, want 1", res.Invalid)
				}
			case "blank":
			default:
				wantMalformed = []LineProblem{{File: "access-1.log", Line: 2, Msg: tt.want}}
			}
			if res.Requests != wantRequests || res.Lines != 3 {
				t.Errorf("requests: got %d of %d lines, want %d of 3 (malformed %v)", res.Requests, res.Lines, wantRequests, res.MalformedLines)
			}
			if fmt.Sprint(res.MalformedLines) != fmt.Sprint(wantMalformed) || res.Malformed != int64(len(wantMalformed)) {
				t.Errorf("malformed: got %d %v, want %v", res.Malformed, res.MalformedLines, wantMalformed)
			}
		})
	}
}

func TestReplayCountsEveryMalformedLine(t *testing.T) {
	t.Parallel()
	var log strings.Builder
	for i := 0; i < 250; i++ {
		log.WriteString("garbage\n")
	}
	res := replayBytes(t, Config{Candidate: compileRules(t, "rules.yaml", basicRules), MaxProblems: 5}, []byte(log.String()))
	if res.Malformed != 250 || len(res.MalformedLines) != 5 || res.MalformedLines[4].Line != 5 {
		t.Errorf("got %d malformed, kept %v; want 250, lines 1..5", res.Malformed, res.MalformedLines)
	}
	var out strings.Builder
	if err := res.WriteSummary(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"malformed:  250 lines skipped:", "access-1.log:1: not JSON", "access-1.log:5: not JSON", "… and 245 more"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReplayReorder checks that lines logged out of time order (as slow
// requests are) are replayed in time order within the window, and counted
// as late beyond it.
func TestReplayReorder(t *testing.T) {
	t.Parallel()
	// Four requests may pass per 10s. The log holds, in this order,
	// requests at 1s, 2s, 3s, 5s, 0.5s and 4s (slow ones), 40s, and 2.5s
	// (very slow).
	rules := compileRules(t, "rules.yaml", `
configs:
  - appId: app-1
    limits:
      - api: /
        limit: 4
        unit: 10s
        algorithm: sliding_log
`)
	var reqs []genRequest
	for _, ms := range []int{1000, 2000, 3000, 5000, 500, 4000, 40000, 2500} {
		reqs = append(reqs, genRequest{at: replayStart.Add(time.Duration(ms) * time.Millisecond), app: "app-1", ip: "203.0.113.1", method: "GET", path: "/"})
	}
	log := accessLog(reqs)
	tests := []struct {
		name   string
		window time.Duration
		order  []int64 // lines in replay order
		late   []int64
		denied []int64 // lines limited, late ones left out (the limiter sees time go back)
	}{
		// In log order, 1s, 2s, 3s and 5s pass, then time goes back.
		{name: "log order", window: 0, order: []int64{1, 2, 3, 4, 5, 6, 7, 8}, late: []int64{5, 6, 8}},
		// Within 5s, the 0.5s and 4s requests are put in place: 0.5s, 1s,
		// 2s and 3s pass, 4s and 5s are limited. The 2.5s request, logged
		// after 40s, is beyond the window: replayed late, before 40s.
		{name: "5s window", window: 5 * time.Second, order: []int64{5, 1, 2, 3, 6, 4, 8, 7}, late: []int64{8}, denied: []int64{6, 4}},
		// Within a minute, everything is in time order.
		{name: "1m window", window: time.Minute, order: []int64{5, 1, 2, 8, 3, 6, 4, 7}, denied: []int64{3, 6, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var order, denied []int64
			res := replayBytes(t, Config{Candidate: rules, ReorderWindow: tt.window, OnRequest: func(r Request) {
				order = append(order, r.Line)
				if r.Candidate == observe.DecisionLimited && !slices.Contains(tt.late, r.Line) {
					denied = append(denied, r.Line)
				}
			}}, log)
			if fmt.Sprint(order) != fmt.Sprint(tt.order) {
				t.Errorf("order: got %v, want %v", order, tt.order)
			}
			var late []int64
			for _, p := range res.LateLines {
				late = append(late, p.Line)
			}
			if fmt.Sprint(late) != fmt.Sprint(tt.late) || res.Late != int64(len(tt.late)) {
				t.Errorf("late: got %d %v, want %v", res.Late, late, tt.late)
			}
			if fmt.Sprint(denied) != fmt.Sprint(tt.denied) {
				t.Errorf("limited: got %v, want %v", denied, tt.denied)
			}
			if !res.First.Equal(replayStart.Add(500*time.Millisecond)) || !res.Last.Equal(replayStart.Add(40*time.Second)) {
				t.Errorf("span: got %v → %v", res.First, res.Last)
			}
		})
	}
}

// TestReplayFiles replays a gzipped log and a plain one, in the order
// given, with line numbers per file.
func TestReplayFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reqs := burstPattern(2)
	half := len(reqs) / 2
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(accessLog(reqs[:half]))
	zw.Close()
	first, second := filepath.Join(dir, "access.log.1.gz"), filepath.Join(dir, "access.log")
	if err := os.WriteFile(first, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(second, append(accessLog(reqs[half:]), "oops\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Files(Config{Candidate: compileRules(t, "rules.yaml", candidateRules)}, []string{first, second})
	if err != nil {
		t.Fatal(err)
	}
	whole := replayBytes(t, Config{Candidate: compileRules(t, "rules.yaml", candidateRules)}, accessLog(reqs))
	if res.Total.Candidate != whole.Total.Candidate || res.Requests != int64(len(reqs)) {
		t.Errorf("two files: got %+v, want %+v as one", res.Total.Candidate, whole.Total.Candidate)
	}
	want := LineProblem{File: second, Line: int64(len(reqs) - half + 1), Msg: "not JSON: invalid character 'o' looking for beginning of value"}
	if len(res.MalformedLines) != 1 || res.MalformedLines[0] != want {
		t.Errorf("malformed: got %v, want %v", res.MalformedLines, want)
	}

	if _, err := Files(Config{Candidate: compileRules(t, "rules.yaml", candidateRules)}, []string{second, filepath.Join(dir, "missing.log")}); err == nil ||
		!strings.Contains(err.Error(), "missing.log") {
		t.Errorf("missing file: got %v, want an error naming it", err)
	}
}

// TestReplaySeriesWiden checks that a replay longer than maxSeriesBuckets
// seconds widens its buckets and keeps every request.
func TestReplaySeriesWiden(t *testing.T) {
	t.Parallel()
	var reqs []genRequest
	for s := 0; s < 3*maxSeriesBuckets; s += 7 {
		reqs = append(reqs, genRequest{at: replayStart.Add(time.Duration(s) * time.Second), app: "app-2", ip: "203.0.113.1", method: "GET", path: "/v1/user"})
	}
	res := replayBytes(t, Config{Candidate: compileRules(t, "rules.yaml", basicRules)}, accessLog(reqs))
	if res.Step != 4*time.Second {
		t.Errorf("step: got %v, want 4s", res.Step)
	}
	var n int64
	for _, b := range res.Total.Series {
		n += b.CandidateAdmitted + b.CandidateLimited
	}
	if n != int64(len(reqs)) || len(res.Total.Series) > maxSeriesBuckets {
		t.Errorf("series: %d requests in %d buckets, want %d in at most %d", n, len(res.Total.Series), len(reqs), maxSeriesBuckets)
	}
	if g := res.Groups[0]; len(g.Series) != len(res.Total.Series) {
		t.Errorf("group series: %d buckets, total %d", len(g.Series), len(res.Total.Series))
	}
}

func TestReplaySummary(t *testing.T) {
	t.Parallel()
	log := accessLog(burstPattern(10))
	log = append(log, "{\"time\":\"2026-11-21T12:00:00Z\",\"msg\":\"access\",\"app_id\":\"\",\"method\":\"GET\",\"path\":\"\",\"client_ip\":\"\",\"decision\":\"invalid\"}\n"...)
	tests := []struct {
		name     string
		baseline bool
		want     []string // in this order
	}{
		{name: "against a baseline", baseline: true, want: []string{
			"Replayed 4,190 requests from 1 file in ",
			"  candidate:  candidate.yaml (sha256 ",
			"  baseline:   current.yaml (sha256 ",
			"  not replayed: 1 invalid request (answered 400, 401 or 403 before any limit)",
			"Newly limited callers (limited by the candidate, never by the baseline):",
			"  app-1      1,200                  0  →        200  (16.7%)",
			"Limited more (by both, more by the candidate):",
			"  app-2      2,090                 90  →      1,090  (52.2%)",
			"No longer limited callers",
			"  203.0.113.1 (unknown caller)       300                100  →          0  (0.0%)",
			"By app and rule",
			"  APP    RULE       REQUESTS  LIMITED: BASELINE     CANDIDATE           CHANGE",
			"  app-2  /v1/order     2,090                 90  →      1,090  (52.2%)  +1,000",
			"  *      /               900                300  →          0   (0.0%)    -300",
			"  app-1  /v1/user      1,200                  0  →        200  (16.7%)    +200",
			"  total                4,190                390  →      1,290  (30.8%)    +900",
		}},
		{name: "alone", want: []string{
			"Replayed 4,190 requests from 1 file in ",
			"Most limited callers:",
			"  app-2      2,090    1,090  (52.2%)",
			"  APP    RULE       REQUESTS  ADMITTED  LIMITED",
			"  app-2  /v1/order     2,090     1,000    1,090  (52.2%)",
			"  total                4,190     2,900    1,290  (30.8%)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Candidate: compileRules(t, "candidate.yaml", candidateRules)}
			if tt.baseline {
				cfg.Baseline = compileRules(t, "current.yaml", currentRules)
			}
			res := replayBytes(t, cfg, log)
			var out strings.Builder
			if err := res.WriteSummary(&out); err != nil {
				t.Fatal(err)
			}
			rest := out.String()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("summary lacks (in order) %q:\n%s", w, out.String())
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestReplayFormatting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		got, want string
	}{
		{"zero", commas(0), "0"},
		{"hundreds", commas(999), "999"},
		{"thousands", commas(1204), "1,204"},
		{"millions", commas(1234567), "1,234,567"},
		{"negative", commas(-1234567), "-1,234,567"},
		{"percent", percent(1204, 38880), "3.1%"},
		{"percent of nothing", percent(0, 0), "0.0%"},
		{"tiny percent", percent(1, 100000), "<0.1%"},
		{"signed up", signed(1204), "+1,204"},
		{"signed down", signed(-5), "-5"},
		{"compact", compact(12500), "12.5k"},
		{"compact small", compact(0.25), "0.25"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// FuzzReplayLine checks that the fast line scanner reads exactly what
// encoding/json reads, whenever it accepts a line.
func FuzzReplayLine(f *testing.F) {
	f.Add(`{"time":"2026-11-21T12:00:00.123Z","level":"INFO","msg":"access","app":"app-1","app_id":"app-1","rule":"/v1/user","method":"GET","path":"/v1/user/42","client_ip":"203.0.113.7","decision":"allowed","status":200,"duration":0.0012,"upstream_duration":1e-3}`)
	f.Add(`{"time":"x","time":"y","path":-0.5E+3,"method":true,"app_id":null}`)
	f.Add(` { } `)
	f.Add(`{"path":"é"}`)
	f.Fuzz(func(t *testing.T, line string) {
		var fast, slow rawLine
		if !scanFast([]byte(line), &fast) {
			return
		}
		if err := scanSlow([]byte(line), &slow); err != nil {
			t.Fatalf("scanFast accepted what encoding/json rejects (%v): %q", err, line)
		}
		if fast.have != slow.have || fast.nonString != slow.nonString {
			t.Fatalf("fields: fast %b/%b, slow %b/%b: %q", fast.have, fast.nonString, slow.have, slow.nonString, line)
		}
		for i := range fast.vals {
			if string(fast.vals[i]) != string(slow.vals[i]) {
				t.Fatalf("%s: fast %q, slow %q: %q", fieldNames[i], fast.vals[i], slow.vals[i], line)
			}
		}
	})
}

// TestReplayLongLines reads lines longer than the read buffer, and reports
// those longer than maxLine.
func TestReplayLongLines(t *testing.T) {
	t.Parallel()
	line := func(pathLen int) string {
		return `{"time":"2026-11-21T12:00:00Z","msg":"access","app_id":"app-2","method":"GET","path":"/v1/user/` +
			strings.Repeat("x", pathLen) + `","client_ip":"203.0.113.7"}` + "\n"
	}
	log := line(10) + line(3<<20) + line(maxLine) + line(10)
	var rules []string
	res := replayBytes(t, Config{Candidate: compileRules(t, "rules.yaml", basicRules), OnRequest: func(r Request) {
		rules = append(rules, fmt.Sprintf("%d %s", r.Line, r.Rule))
	}}, []byte(log))
	if got, want := strings.Join(rules, ", "), "1 /v1/user, 2 /v1/user, 4 /v1/user"; got != want {
		t.Errorf("replayed: got %s, want %s", got, want)
	}
	want := fmt.Sprintf("[access-1.log:3: line is longer than %d MiB]", maxLine>>20)
	if got := fmt.Sprint(res.MalformedLines); got != want {
		t.Errorf("malformed: got %s, want %s", got, want)
	}
}

// TestReplayResponses checks that rules that count only some statuses or
// charge a cost the upstream reports (docs/rules.md, "Request cost")
// replay what the live upstream answered, as the access log has it: the
// status and upstream_cost of the requests the live gateway forwarded.
func TestReplayResponses(t *testing.T) {
	t.Parallel()
	rules := compileRules(t, "responses.yaml", `
configs:
  - appId: app-1
    limits:
      - api: /login
        limit: 3
        unit: 1h
        count: {status: [401]}
      - api: /llm
        limit: 100
        unit: 1h
        cost: {header: X-RateLimit-Cost}
`)
	var log bytes.Buffer
	line := func(i int, path, decision string, status int, cost string) {
		fmt.Fprintf(&log, `{"time":%q,"level":"INFO","msg":"access","app_id":"app-1","method":"POST","path":%q,"client_ip":"192.0.2.1","decision":%q,"status":%d`,
			t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), path, decision, status)
		if cost != "" {
			fmt.Fprintf(&log, `,"upstream_cost":%s`, cost)
		}
		log.WriteString("}\n")
	}
	// Three failed logins among successes: the next login is refused;
	// a 429 answered live counts nothing, whatever its status.
	for i, status := range []int{200, 401, 429, 401, 200, 401, 200} {
		decision := "allowed"
		if status == 429 {
			decision = "limited"
		}
		line(i, "/login", decision, status, "")
	}
	// 40 units reported each: the fourth call finds 120 of 100 spent.
	for i := range 4 {
		line(10+i, "/llm", "allowed", 200, "40")
	}
	res := replayBytes(t, Config{Candidate: rules}, log.Bytes())
	if res.Malformed != 0 {
		t.Fatalf("malformed lines: %d", res.Malformed)
	}
	for _, tt := range []struct {
		rule              string
		admitted, limited int64
	}{
		{"/login", 6, 1},
		{"/llm", 3, 1},
	} {
		c := groupOf(t, res, "app-1", tt.rule).Candidate
		if c.Admitted != tt.admitted || c.Limited != tt.limited {
			t.Errorf("%s: admitted %d, limited %d; want %d and %d", tt.rule, c.Admitted, c.Limited, tt.admitted, tt.limited)
		}
	}
}
