package replay

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// benchLogLines is the size of the benchmark's log: the figure.
const benchLogLines = 1_000_000

var benchLog = sync.OnceValue(func() []byte {
	// A mix like production's: 20 configured apps over a few APIs, 2,000
	// unknown callers, one request a millisecond (17 minutes of traffic).
	reqs := make([]genRequest, 0, benchLogLines)
	apis := []string{"/v1/user/%d", "/v1/user/%d/orders", "/v1/order", "/v1/health", "/static/%d.js"}
	for i := 0; i < benchLogLines; i++ {
		q := genRequest{at: replayStart.Add(time.Duration(i) * time.Millisecond), method: "GET"}
		q.path = apis[i%len(apis)]
		if strings.Contains(q.path, "%d") {
			q.path = fmt.Sprintf(q.path, i%1000)
		}
		if i%4 == 3 {
			q.ip = fmt.Sprintf("198.51.%d.%d", (i/7)%8, (i/13)%250)
		} else {
			q.app = fmt.Sprintf("app-%d", i%20)
			q.ip = fmt.Sprintf("203.0.113.%d", i%20)
		}
		if i%10 == 0 {
			q.method = "POST"
		}
		reqs = append(reqs, q)
	}
	return accessLog(reqs)
})

const benchRules = `
configs:
%s  - appId: "*"
    limits:
      - api: /
        limit: %d
        unit: 1m
`

func benchRuleFile(limit int) string {
	var apps bytes.Buffer
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&apps, `  - appId: app-%d
    limit: %d
    unit: 1m
    limits:
      - api: /v1/user
        limit: %d
        unit: 1m
      - api: /v1/user/{id}/orders
        method: [GET]
        limit: %d
        algorithm: token_bucket
      - api: /v1/order
        limit: %d
        unit: 10s
        algorithm: sliding_log
      - api: /v1/health
        limit: -1
`, i, 40*limit, 10*limit, limit, limit/2)
	}
	return fmt.Sprintf(benchRules, apps.String(), limit)
}

// BenchmarkReplay replays a 1,000,000-line access log: one op is the whole
// log.
func BenchmarkReplay(b *testing.B) {
	log := benchLog()
	cand := compileRules(b, "candidate.yaml", benchRuleFile(50))
	base := compileRules(b, "current.yaml", benchRuleFile(100))
	for _, bc := range []struct {
		name     string
		baseline *ruleset.Set
	}{
		{"candidate", nil},
		{"candidate+baseline", base},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(log)))
			for b.Loop() {
				res, err := Run(Config{Candidate: cand, Baseline: bc.baseline, ReorderWindow: 30 * time.Second},
					Input{Name: "bench.log", R: bytes.NewReader(log)})
				if err != nil {
					b.Fatal(err)
				}
				if res.Requests != benchLogLines {
					b.Fatalf("replayed %d requests, want %d", res.Requests, benchLogLines)
				}
			}
			b.ReportMetric(float64(benchLogLines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// BenchmarkReplayParse is the parsing alone, per line.
func BenchmarkReplayParse(b *testing.B) {
	log := benchLog()
	lines := bytes.SplitN(log, []byte("\n"), 1001)[:1000]
	p := newLineParser()
	var rec replayRecord
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if kind, err := p.parse(lines[i%len(lines)], &rec); kind != lineRecord {
			b.Fatal(err)
		}
		i++
	}
}
