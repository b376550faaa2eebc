package usage

import (
	"strings"
	"testing"
)

func paths(t *testing.T, ss ...string) []Path {
	t.Helper()
	var ps []Path
	for _, s := range ss {
		p, err := ParsePath(s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

const openAIStream = "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n" +
	"data: [DONE]\n\n"

const anthropicStream = "event: message_start\r\n" +
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n" +
	"event: content_block_delta\r\n" +
	"data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\r\n\r\n" +
	"event: message_delta\r\n" +
	"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\r\n\r\n" +
	"event: message_delta\r\n" +
	"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\n\r\n" +
	"event: message_stop\r\n" +
	"data: {\"type\":\"message_stop\"}\r\n\r\n"

func TestMeter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ct       string
		paths    []string
		body     string
		inspect  int
		want     int64
		wantSeen bool
	}{
		{"openai json", "application/json", []string{"usage.total_tokens"},
			`{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 0, 21, true},
		{"json without usage", "application/json", []string{"usage.total_tokens"}, `{"id":"c1"}`, 0, 0, false},
		{"json not a number", "application/json", []string{"usage.total_tokens"}, `{"usage":{"total_tokens":"21"}}`, 0, 0, false},
		{"json negative", "application/json", []string{"usage.total_tokens"}, `{"usage":{"total_tokens":-3}}`, 0, 0, false},
		{"json broken", "application/json", []string{"usage.total_tokens"}, `{"usage":{"total_tokens":21`, 0, 0, false},
		{"json over the cap", "application/json", []string{"usage.total_tokens"}, `{"usage":{"total_tokens":21}}`, 10, 0, false},
		{"anthropic json", "application/json", []string{"usage.input_tokens", "usage.output_tokens"},
			`{"type":"message","usage":{"input_tokens":25,"output_tokens":15}}`, 0, 40, true},
		{"openai stream", "text/event-stream", []string{"usage.total_tokens"}, openAIStream, 0, 21, true},
		{"anthropic stream", "text/event-stream; charset=utf-8", []string{"message.usage.input_tokens", "usage.output_tokens"}, anthropicStream, 0, 40, true},
		{"stream without final newline", "text/event-stream", []string{"usage.total_tokens"}, "data: {\"usage\":{\"total_tokens\":5}}", 0, 5, true},
		{"multi-line data", "text/event-stream", []string{"usage.total_tokens"}, "data: {\"usage\":\ndata: {\"total_tokens\":6}}\n\n", 0, 6, true},
		{"event over the cap", "text/event-stream", []string{"usage.total_tokens"}, "data: {\"usage\":{\"total_tokens\":5},\"pad\":\"" + strings.Repeat("x", 100) + "\"}\n\n", 50, 0, false},
		// A byte-order mark at the start is not the body's (the
		// event-stream format says to ignore it); bytes that only begin
		// like one are.
		{"json after a byte-order mark", "application/json", []string{"usage.total_tokens"}, "\ufeff{\"usage\":{\"total_tokens\":21}}", 0, 21, true},
		{"stream after a byte-order mark", "text/event-stream", []string{"usage.total_tokens"}, "\ufeff" + openAIStream, 0, 21, true},
		{"json after half a mark", "application/json", []string{"usage.total_tokens"}, "\xef\xbb{\"usage\":{\"total_tokens\":21}}", 0, 0, false},
		{"json after two marks", "application/json", []string{"usage.total_tokens"}, "\ufeff\ufeff{\"usage\":{\"total_tokens\":21}}", 0, 0, false},
		{"event after an oversized one", "text/event-stream", []string{"usage.total_tokens"}, "data: \"" + strings.Repeat("x", 100) + "\"\n\ndata: {\"usage\":{\"total_tokens\":5}}\n\n", 50, 5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The result must not depend on how the body is split: try
			// it whole, byte by byte, and cut at every point.
			splits := [][]string{{tc.body}, strings.Split(tc.body, "")}
			for i := 1; i < len(tc.body); i++ {
				splits = append(splits, []string{tc.body[:i], tc.body[i:]})
			}
			for _, parts := range splits {
				m := NewMeter(paths(t, tc.paths...), tc.ct, tc.inspect)
				for _, p := range parts {
					m.Write([]byte(p))
				}
				m.Close()
				got, seen := m.Used()
				if got != tc.want || seen != tc.wantSeen {
					t.Fatalf("split in %d: got %d, %v; want %d, %v", len(parts), got, seen, tc.want, tc.wantSeen)
				}
			}
		})
	}
}

// TestMeterSoFar checks that a stream's usage is known as its events
// arrive, before the stream ends, as an aborted stream is charged.
func TestMeterSoFar(t *testing.T) {
	t.Parallel()
	m := NewMeter(paths(t, "message.usage.input_tokens", "usage.output_tokens"), "text/event-stream", 0)
	cut := strings.Index(anthropicStream, "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}")
	m.Write([]byte(anthropicStream[:cut]))
	if got, seen := m.Used(); got != 32 || !seen {
		t.Errorf("after the first delta: got %d, %v; want 32, true", got, seen)
	}
}

// TestMeterLargeNumbers: a usage too large to count is read as MaxUsage,
// which every limit's max caps, never as unseen (which would charge a
// limit's min); a fraction is rounded up.
func TestMeterLargeNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		usage    string
		want     int64
		wantSeen bool
	}{
		{name: "exponent", usage: "1e30", want: MaxUsage, wantSeen: true},
		{name: "twenty digits", usage: "12345678901234567890", want: MaxUsage, wantSeen: true},
		{name: "beyond float64", usage: "1e400", want: MaxUsage, wantSeen: true},
		{name: "int64 above MaxUsage", usage: "9000000000000000000", want: MaxUsage, wantSeen: true},
		{name: "whole number as exponent", usage: "4e3", want: 4000, wantSeen: true},
		{name: "fraction rounded up", usage: "2.5", want: 3, wantSeen: true},
		{name: "negative exponent", usage: "-1e30", want: 0, wantSeen: false},
		{name: "negative", usage: "-12345678901234567890", want: 0, wantSeen: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMeter(paths(t, "usage.total_tokens"), "application/json", 0)
			m.Write([]byte(`{"usage":{"total_tokens":` + tc.usage + `}}`))
			m.Close()
			if got, seen := m.Used(); got != tc.want || seen != tc.wantSeen {
				t.Errorf("usage %s: got %d, %v; want %d, %v", tc.usage, got, seen, tc.want, tc.wantSeen)
			}
		})
	}
	// Two huge paths add up without overflowing.
	m := NewMeter(paths(t, "usage.input_tokens", "usage.output_tokens"), "application/json", 0)
	m.Write([]byte(`{"usage":{"input_tokens":9223372036854775807,"output_tokens":1e300}}`))
	m.Close()
	if got, seen := m.Used(); got != MaxUsage || !seen {
		t.Errorf("two huge usages: got %d, %v; want %d, true", got, seen, int64(MaxUsage))
	}
}

// TestMeterSkipped: a body, or an event, longer than inspect is reported
// as skipped, so that its usage counts as unknown rather than absent.
func TestMeterSkipped(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 100)
	tests := []struct {
		name, ct, body string
		want           bool
	}{
		{"json within", "application/json", `{"id":"c1"}`, false},
		{"json over", "application/json", `{"pad":"` + pad + `"}`, true},
		{"stream within", "text/event-stream", "data: {\"id\":1}\n\n", false},
		{"stream event over", "text/event-stream", "data: \"" + pad + "\"\n\ndata: {\"id\":1}\n\n", true},
		{"stream last event over, unended", "text/event-stream", "data: \"" + pad, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMeter(paths(t, "usage.total_tokens"), tc.ct, 50)
			m.Write([]byte(tc.body))
			m.Close()
			if got := m.Skipped(); got != tc.want {
				t.Errorf("Skipped: got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePath(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", ".", "usage.", ".usage", "a..b"} {
		if _, err := ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q): no error", bad)
		}
	}
	p, err := ParsePath("usage.total_tokens")
	if err != nil || p.String() != "usage.total_tokens" || len(p) != 2 {
		t.Errorf("ParsePath: got %v, %v", p, err)
	}
}

func BenchmarkMeterStream(b *testing.B) {
	var sb strings.Builder
	for range 200 {
		sb.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token \"}}]}\n\n")
	}
	sb.WriteString("data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":200,\"total_tokens\":209}}\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	ps := []Path{{"usage", "total_tokens"}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		m := NewMeter(ps, "text/event-stream", 0)
		for i := 0; i < len(body); i += 512 {
			m.Write(body[i:min(i+512, len(body))])
		}
		m.Close()
		if n, _ := m.Used(); n != 209 {
			b.Fatal(n)
		}
	}
}

func BenchmarkMeterEvents(b *testing.B) {
	var events [][]byte
	for range 200 {
		events = append(events, []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token \"}}]}\n\n"))
	}
	events = append(events, []byte("data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":200,\"total_tokens\":209}}\n\n"), []byte("data: [DONE]\n\n"))
	ps := []Path{{"usage", "total_tokens"}}
	b.ReportAllocs()
	for b.Loop() {
		m := NewMeter(ps, "text/event-stream", 0)
		for _, e := range events {
			m.Write(e)
		}
		m.Close()
		if n, _ := m.Used(); n != 209 {
			b.Fatal(n)
		}
	}
}
