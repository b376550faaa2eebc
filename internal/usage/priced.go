package usage

import "slices"

// This file reads what a priced budget needs of a response: its input
// and output tokens apart, and the model that served it, from the
// bodies and events of OpenAI's Chat Completions and Responses APIs and
// of Anthropic's Messages API (docs/plans-and-tokens.md, "Budgets in
// money").

// The fields read for a price, each list in order of preference: the
// first one a response reports is its count. Anthropic's message_start
// reports message.usage.input_tokens (and an output_tokens of 1 or so),
// its message_delta the cumulative usage.output_tokens (and, lately,
// usage.input_tokens again): preferring usage.* over message.usage.*
// counts each once. The Responses API streams its usage in the
// response.completed event's response.usage.
var (
	InputPaths  = []Path{{"usage", "prompt_tokens"}, {"usage", "input_tokens"}, {"response", "usage", "input_tokens"}, {"message", "usage", "input_tokens"}}
	OutputPaths = []Path{{"usage", "completion_tokens"}, {"usage", "output_tokens"}, {"response", "usage", "output_tokens"}, {"message", "usage", "output_tokens"}}
	ModelPaths  = []Path{{"model"}, {"message", "model"}, {"response", "model"}}
)

// PricedPaths returns the number fields a priced Meter reads: the input
// paths, then the output paths.
func PricedPaths() []Path {
	return append(append([]Path(nil), InputPaths...), OutputPaths...)
}

// NewPricedMeter returns a Meter of a priced budget's fields: the input
// and output tokens (Tokens) and the model (Model).
func NewPricedMeter(contentType string, inspect int) *Meter {
	m := NewMeter(PricedPaths(), contentType, inspect)
	m.priced = true
	m.needles = append(m.needles, []byte(needle("model")))
	return m
}

// Tokens returns the input and output tokens a priced Meter read so far,
// and whether it read either.
func (m *Meter) Tokens() (in, out int64, seen bool) {
	first := func(from, to int) (int64, bool) {
		for i := from; i < to; i++ {
			if m.seen[i] {
				return m.last[i], true
			}
		}
		return 0, false
	}
	in, s1 := first(0, len(InputPaths))
	out, s2 := first(len(InputPaths), len(m.paths))
	return in, out, s1 || s2
}

// Model returns the model a priced Meter's response named, "" if none:
// the first value of a model field, which stays the same through a
// stream.
func (m *Meter) Model() string { return m.model }

// readModel keeps the first model field of v, and stops looking for it
// once it is found, so that the events of a stream that carry only their
// model are skipped unparsed again.
func (m *Meter) readModel(v any) {
	if !m.priced || m.model != "" {
		return
	}
	for _, p := range ModelPaths {
		if s, ok := lookupString(v, p); ok && s != "" {
			m.model = s
			m.needles = slices.DeleteFunc(m.needles, func(b []byte) bool { return string(b) == needle("model") })
			return
		}
	}
}

// lookupString returns the string at path p of v.
func lookupString(v any, p Path) (string, bool) {
	for _, k := range p {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[k]; !ok {
			return "", false
		}
	}
	s, ok := v.(string)
	return s, ok && len(s) <= 256
}
