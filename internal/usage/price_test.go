package usage

import (
	"strings"
	"testing"
)

func TestParseMicros(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want int64
		bad  bool
	}{
		{"whole", "10", 10_000_000, false},
		{"cents", "2.50", 2_500_000, false},
		{"six decimals", "0.000001", 1, false},
		{"leading dot", ".5", 500_000, false},
		{"trailing dot", "3.", 3_000_000, false},
		{"seven decimals", "0.0000001", 0, true},
		{"negative", "-1", 0, true},
		{"exponent", "1e3", 0, true},
		{"empty", "", 0, true},
		{"dot", ".", 0, true},
		{"two dots", "1.2.3", 0, true},
		{"too large", "99999999999999999999", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMicros(tt.in)
			if (err != nil) != tt.bad {
				t.Fatalf("ParseMicros(%q): error %v, want error %v", tt.in, err, tt.bad)
			}
			if got != tt.want {
				t.Errorf("ParseMicros(%q): got %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatMicros(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0.00", 1: "0.000001", 2_500_000: "2.50", 1_234_567: "1.234567", -10: "-0.00001"} {
		if got := FormatMicros(n); got != want {
			t.Errorf("FormatMicros(%d): got %q, want %q", n, got, want)
		}
	}
}

func TestPriceCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       Price
		in, out int64
		want    int64
	}{
		// gpt-4o at $2.50 in, $10 out per million tokens.
		{"exact", Price{2_500_000, 10_000_000}, 1000, 500, 7500},
		{"rounded up once", Price{150_000, 600_000}, 9, 12, 9}, // 1.35+7.2 = 8.55 µ
		{"free", Price{}, 1000, 1000, 0},
		{"one token", Price{1, 0}, 1, 0, 1},
		{"huge", Price{MaxPrice, MaxPrice}, MaxUsage, MaxUsage, MaxUsage},
		{"negative", Price{1, 1}, -1, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Cost(tt.in, tt.out); got != tt.want {
				t.Errorf("Cost(%d, %d): got %d, want %d", tt.in, tt.out, got, tt.want)
			}
		})
	}
}

// TestPriceCostNoDrift checks that a thousand responses cost exactly a
// thousand times one: the count is whole micro-units, never a float sum.
func TestPriceCostNoDrift(t *testing.T) {
	t.Parallel()
	p := Price{Input: 100_000, Output: 400_000} // $0.10 / $0.40
	var sum int64
	for range 1000 {
		sum += p.Cost(10, 10) // 1 + 4 = 5 µ
	}
	if sum != 5000 {
		t.Errorf("1000 × Cost(10, 10): got %d, want 5000", sum)
	}
}

func TestPricesResolve(t *testing.T) {
	t.Parallel()
	gpt4o, mini, claude, other := Price{2_500_000, 10_000_000}, Price{150_000, 600_000}, Price{3_000_000, 15_000_000}, Price{1, 1}
	p, err := NewPrices(map[string]Price{"gpt-4o": gpt4o, "gpt-4o-mini*": mini, "claude-*": claude, "*": other})
	if err != nil {
		t.Fatal(err)
	}
	noOther, err := NewPrices(map[string]Price{"gpt-4o": gpt4o})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		p             *Prices
		served, asked string
		want          Price
		ok            bool
	}{
		{"served wins", p, "gpt-4o-mini-2024-07-18", "gpt-4o", mini, true},
		{"asked when served unnamed", p, "gpt-4o-2024-08-06", "gpt-4o", gpt4o, true},
		{"asked when served empty", p, "", "claude-sonnet-4-5", claude, true},
		{"other", p, "o3", "o3", other, true},
		{"exact only", noOther, "gpt-4o-2024-08-06", "", Price{}, false},
		{"none", noOther, "", "o3", Price{}, false},
		{"nil table", nil, "gpt-4o", "gpt-4o", Price{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.p.Resolve(tt.served, tt.asked)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Resolve(%q, %q): got %v %v, want %v %v", tt.served, tt.asked, got, ok, tt.want, tt.ok)
			}
		})
	}
	for _, bad := range []map[string]Price{{"": {}}, {"gpt*4o": {}}, {"a**": {}}, {"x": {Input: -1}}, {"x": {Output: MaxPrice + 1}}} {
		if _, err := NewPrices(bad); err == nil {
			t.Errorf("NewPrices(%v): no error", bad)
		}
	}
}

func TestPricedMeter(t *testing.T) {
	t.Parallel()
	const anthropicModern = "event: message_start\n" +
		"data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\n" +
		"data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":25,\"output_tokens\":15}}\n\n"
	const responsesStream = "event: response.created\n" +
		"data: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-4o-2024-08-06\",\"usage\":null}}\n\n" +
		"event: response.output_text.delta\n" +
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\n" +
		"data: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-4o-2024-08-06\",\"usage\":{\"input_tokens\":30,\"output_tokens\":8,\"total_tokens\":38}}}\n\n"
	const chatStream = "data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
		"data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
		"data: {\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n" +
		"data: [DONE]\n\n"
	tests := []struct {
		name, ct, body string
		in, out        int64
		seen           bool
		model          string
	}{
		{"chat json", "application/json", `{"model":"gpt-4o","usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 9, 12, true, "gpt-4o"},
		{"chat stream", "text/event-stream", chatStream, 9, 12, true, "gpt-4o-mini"},
		{"responses json", "application/json", `{"model":"o3","usage":{"input_tokens":30,"output_tokens":8,"total_tokens":38}}`, 30, 8, true, "o3"},
		{"responses stream", "text/event-stream", responsesStream, 30, 8, true, "gpt-4o-2024-08-06"},
		{"anthropic json", "application/json", `{"type":"message","model":"claude-haiku-4-5","usage":{"input_tokens":25,"output_tokens":15}}`, 25, 15, true, "claude-haiku-4-5"},
		{"anthropic stream", "text/event-stream", anthropicStream, 25, 15, true, ""},
		{"anthropic stream, input in message_delta too", "text/event-stream", anthropicModern, 25, 15, true, "claude-sonnet-4-5"},
		{"anthropic stream cut after message_start", "text/event-stream", strings.SplitAfter(anthropicModern, "\n\n")[0], 25, 1, true, "claude-sonnet-4-5"},
		{"no usage", "application/json", `{"model":"gpt-4o"}`, 0, 0, false, "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Byte by byte as well as whole: the model and counts must
			// not depend on how the body is cut.
			for _, step := range []int{len(tt.body), 1} {
				m := NewPricedMeter(tt.ct, 0)
				for b := []byte(tt.body); len(b) > 0; b = b[min(step, len(b)):] {
					m.Write(b[:min(step, len(b))])
				}
				m.Close()
				in, out, seen := m.Tokens()
				if in != tt.in || out != tt.out || seen != tt.seen || m.Model() != tt.model {
					t.Errorf("step %d: got in %d out %d seen %v model %q, want %d %d %v %q", step, in, out, seen, m.Model(), tt.in, tt.out, tt.seen, tt.model)
				}
			}
		})
	}
}
