package replay

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestReplayTokenBudget checks that a cost read from the response body
// (docs/plans-and-tokens.md) replays the usage the access log recorded.
func TestReplayTokenBudget(t *testing.T) {
	t.Parallel()
	rules := compileRules(t, "tokens.yaml", `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat
        limit: 100
        unit: 1h
        cost: {body: usage.total_tokens}
      - api: /v1/messages
        limit: 100
        unit: 1h
        cost: {body: [usage.input_tokens, usage.output_tokens]}
`)
	var log bytes.Buffer
	for _, path := range []string{"/v1/chat", "/v1/messages"} {
		// 40 tokens each: the fourth call finds 120 of 100 spent.
		for i := range 4 {
			fmt.Fprintf(&log, `{"time":%q,"level":"INFO","msg":"access","app_id":"app-1","method":"POST","path":%q,"client_ip":"192.0.2.1","decision":"allowed","status":200,"upstream_cost":40}`+"\n",
				t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), path)
		}
	}
	res := replayBytes(t, Config{Candidate: rules}, log.Bytes())
	for _, rule := range []string{"/v1/chat", "/v1/messages"} {
		c := groupOf(t, res, "app-1", rule).Candidate
		if c.Admitted != 3 || c.Limited != 1 {
			t.Errorf("%s: admitted %d, limited %d; want 3 and 1", rule, c.Admitted, c.Limited)
		}
	}
}
