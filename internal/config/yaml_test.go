package config

import "testing"

// TestYAMLErrors pins the text of every yaml error that yamlError reads:
// the "line N: " form and its numbering (from 0 for parser errors, from 1
// for scanner errors), each message of yamlParserProblems and
// yamlBlockProblems, the unknown-anchor message and the reader's errors,
// which carry no line. A yaml release that changes one of them fails
// here rather than putting errors on the wrong line.
func TestYAMLErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		raw  string // yaml's error
		line int    // the line Parse reports
		msg  string // Parse's message
	}{
		// Parser errors.
		{
			name: "directive after a document",
			data: "a: 1\n%YAML 1.1\n",
			raw:  "yaml: line 2: did not find expected <document start>",
			line: 2, msg: "did not find expected <document start>",
		},
		{
			name: "unclosed flow sequence at the end",
			data: "configs: [a,\n",
			raw:  "yaml: line 1: did not find expected node content",
			line: 1, msg: "did not find expected node content",
		},
		{
			name: "unclosed flow sequence",
			data: "a: 1\nb: [c\n",
			raw:  "yaml: line 1: did not find expected ',' or ']'",
			line: 2, msg: "did not find expected ',' or ']'",
		},
		{
			name: "unclosed flow mapping",
			data: "a: 1\nb: {c: 1, d\n",
			raw:  "yaml: line 1: did not find expected ',' or '}'",
			line: 2, msg: "did not find expected ',' or '}'",
		},
		{
			name: "undefined tag handle",
			data: "x: 1\na: !e!foo bar\n",
			raw:  "yaml: line 1: found undefined tag handle",
			line: 2, msg: "found undefined tag handle",
		},
		{
			name: "duplicate YAML directive",
			data: "%YAML 1.1\n%YAML 1.1\n---\na: 1\n",
			raw:  "yaml: line 1: found duplicate %YAML directive",
			line: 2, msg: "found duplicate %YAML directive",
		},
		{
			name: "duplicate TAG directive",
			data: "%TAG !e! tag:a,2000:\n%TAG !e! tag:b,2000:\n---\na: 1\n",
			raw:  "yaml: line 1: found duplicate %TAG directive",
			line: 2, msg: "found duplicate %TAG directive",
		},
		{
			// On the first line (line 0 to the parser), yaml gives no
			// line at all.
			name: "incompatible YAML version",
			data: "%YAML 2.0\n---\na: 1\n",
			raw:  "yaml: found incompatible YAML document",
			line: 0, msg: "found incompatible YAML document",
		},
		// Block errors: yaml names the line where the block starts.
		{
			name: "misindented sequence item",
			data: "configs:\n  - appId: a\n   limits: []\n",
			raw:  "yaml: line 1: did not find expected '-' indicator",
			line: 3, msg: "did not find expected '-' indicator",
		},
		{
			name: "misindented key",
			data: "configs:\n  - appId: b\n    limits:\n    - api: /\n      limit: 1\n     unit: 1\n",
			raw:  "yaml: line 1: did not find expected key",
			line: 6, msg: "did not find expected key",
		},
		// A scanner error, numbered from 1.
		{
			name: "missing colon",
			data: "configs:\n  - appId: a\n    limit 1\n    by: ip\n",
			raw:  "yaml: line 3: could not find expected ':'",
			line: 3, msg: "could not find expected ':'",
		},
		// Errors without a line.
		{
			name: "unknown anchor",
			data: "configs:\n  - appId: a\n    limits: *rules\n",
			raw:  "yaml: unknown anchor 'rules' referenced",
			line: 3, msg: "the alias *rules names no anchor &rules defined before it",
		},
		{
			name: "control character",
			data: "configs:\n  - appId: a\x01\n",
			raw:  "yaml: control characters are not allowed",
			line: 2, msg: "control characters are not allowed",
		},
		{
			name: "invalid utf-8",
			data: "configs:\n  - appId: a\n    limits: \xff\n",
			raw:  "yaml: invalid leading UTF-8 octet",
			line: 3, msg: "invalid leading UTF-8 octet",
		},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.msg] = true
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := yamlDocuments([]byte(tt.data))
			if err == nil || err.Error() != tt.raw {
				t.Errorf("yaml error: got %v, want %q", err, tt.raw)
			}
			_, err = Parse("rules.yaml", []byte(tt.data))
			errs, ok := err.(Errors)
			if !ok || len(errs) != 1 {
				t.Fatalf("Parse: got %v, want one error", err)
			}
			if got, want := errs[0].Msg, "the file is not valid YAML: "+tt.msg; errs[0].Line != tt.line || got != want {
				t.Errorf("Parse: got line %d %q, want line %d %q", errs[0].Line, got, tt.line, want)
			}
		})
	}
	for _, m := range []map[string]bool{yamlParserProblems, yamlBlockProblems} {
		for msg := range m {
			if !covered[msg] {
				t.Errorf("no test case for the yaml message %q", msg)
			}
		}
	}
}
