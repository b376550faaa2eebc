package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// decodeJSON parses data into the same node tree that decodeYAML builds,
// with line numbers, so that one walker validates both formats. It returns
// the root node (nil for an empty file) and whether data is well-formed
// JSON.
//
// JSON is not handed to the YAML parser: valid JSON is not always valid
// YAML to the yaml package (it rejects the escape "\/", for one), and a
// JSON file should be judged by JSON's rules.
func (p *parser) decodeJSON(data []byte) (*yaml.Node, bool) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, true
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		line := 0
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			line = jsonErrorLine(data, se.Offset)
		}
		p.errorf(line, "the file is not valid JSON: %s", err)
		return nil, false
	}
	b := &jsonBuilder{dec: json.NewDecoder(bytes.NewReader(data)), data: data, line: 1}
	b.dec.UseNumber()
	root, err := b.node()
	if err == nil {
		if _, err = b.dec.Token(); err == io.EOF {
			return root, true
		} else if err == nil {
			err = errors.New("unexpected data after the top-level value")
		}
	}
	// Unreachable: json.Unmarshal has checked the input.
	p.errorf(0, "the file is not valid JSON: %s", err)
	return nil, false
}

// jsonErrorLine returns the line of a syntax error that json reports
// after reading offset bytes. An error at the end of the input (a missing
// closing brace) is put on the last line that has text, not after the
// final newline.
func jsonErrorLine(data []byte, offset int64) int {
	off := int(min(max(offset, 0), int64(len(data))))
	if off == len(data) {
		off = len(bytes.TrimRight(data, " \t\r\n"))
	}
	return 1 + bytes.Count(data[:off], []byte{'\n'})
}

// jsonBuilder turns a stream of JSON tokens into a yaml.Node tree.
type jsonBuilder struct {
	dec  *json.Decoder
	data []byte
	// pos and line track the line of byte offset pos, so that counting
	// newlines is linear in the input: offsets only grow.
	pos, line int
}

// lineAt returns the line of the token that ends at byte offset off. JSON
// tokens never span lines, so its end is on the line where it starts.
func (b *jsonBuilder) lineAt(off int64) int {
	end := int(min(off, int64(len(b.data))))
	if end > b.pos {
		b.line += bytes.Count(b.data[b.pos:end], []byte{'\n'})
		b.pos = end
	}
	return b.line
}

// node reads one JSON value. Its nesting is bounded by the depth limit
// that json.Unmarshal enforced on the same input.
func (b *jsonBuilder) node() (*yaml.Node, error) {
	tok, err := b.dec.Token()
	if err != nil {
		return nil, err
	}
	line := b.lineAt(b.dec.InputOffset())
	scalar := func(tag, value string, style yaml.Style) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Style: style, Line: line}
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle, Line: line}
		if t == '[' {
			n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		} else if t != '{' {
			return nil, fmt.Errorf("unexpected %q", t)
		}
		for b.dec.More() {
			c, err := b.node()
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		if _, err := b.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return scalar("!!str", t, yaml.DoubleQuotedStyle), nil
	case json.Number:
		if _, err := t.Int64(); err == nil {
			return scalar("!!int", t.String(), 0), nil
		}
		return scalar("!!float", t.String(), 0), nil
	case bool:
		if t {
			return scalar("!!bool", "true", 0), nil
		}
		return scalar("!!bool", "false", 0), nil
	case nil:
		return scalar("!!null", "null", 0), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}
