package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Load reads the rule file at path and parses it with Parse: LoadMax with
// DefaultMaxBytes.
func Load(path string) (*Rules, error) {
	return LoadMax(path, DefaultMaxBytes)
}

// Parse parses, defaults and validates the rule file data read from path.
// The format follows the extension of path: .yaml or .yml for YAML, .json
// for JSON, .xml for XML (docs/rules.md, "Rule file" shows its shape).
//
// When the file has problems Parse returns nil and an Errors listing all of
// them, each with the file and line.
//
// Parse keeps no reference to data and is safe for concurrent use. Apps
// that share a list of limits through a YAML alias share its slice in the
// result, which nobody may modify.
func Parse(path string, data []byte) (*Rules, error) {
	p := newParser(path)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		return p.parse(FormatYAML, data)
	case ".json":
		return p.parse(FormatJSON, data)
	case ".xml":
		return p.parse(FormatXML, data)
	case "":
		p.errorf(0, "the rule file name has no extension; name it *.yaml, *.yml, *.json or *.xml so its format is known")
	default:
		p.errorf(0, "the rule file extension %q is not supported; name it *.yaml, *.yml, *.json or *.xml", ext)
	}
	return nil, p.errs.sorted()
}

// A Format is a rule file format.
type Format string

// The formats.
const (
	FormatYAML Format = "yaml"
	FormatJSON Format = "json"
	FormatXML  Format = "xml"
)

// FormatOf returns the format of rules named name (a file name or a key)
// and holding data: the one its extension names, else the one data looks
// like: XML when its first character that is not white space is '<',
// JSON when it is '{', else YAML (of which JSON is nearly a subset).
func FormatOf(name string, data []byte) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return FormatYAML
	case ".json":
		return FormatJSON
	case ".xml":
		return FormatXML
	}
	t := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
	switch {
	case len(t) > 0 && t[0] == '<':
		return FormatXML
	case len(t) > 0 && t[0] == '{':
		return FormatJSON
	}
	return FormatYAML
}

// ParseFormat is Parse for rules in format f read from name, which need
// not be a file name (an etcd key, say): it names the rules in errors and
// in Rules.Path.
func ParseFormat(name string, f Format, data []byte) (*Rules, error) {
	p := newParser(name)
	switch f {
	case FormatYAML, FormatJSON, FormatXML:
		return p.parse(f, data)
	}
	p.errorf(0, "the rule format %q is not supported; use yaml, json or xml", f)
	return nil, p.errs.sorted()
}

// parse parses data in format f.
func (p *parser) parse(f Format, data []byte) (*Rules, error) {
	var root *yaml.Node
	ok := false
	switch f {
	case FormatYAML:
		root, ok = p.decodeYAML(data)
	case FormatJSON:
		p.json = true
		root, ok = p.decodeJSON(data)
	case FormatXML:
		p.xml = true
		root, ok = p.decodeXML(data)
	}
	var rules *Rules
	if ok {
		rules = p.rules(root)
	}
	if len(p.errs) > 0 {
		return nil, p.errs.sorted()
	}
	sum := sha256.Sum256(data)
	rules.Path = p.file
	rules.SHA256 = hex.EncodeToString(sum[:])
	return rules, nil
}

// decodeYAML parses data into a node tree. It returns the root node (nil
// for an empty file) and whether data is well-formed YAML.
func (p *parser) decodeYAML(data []byte) (*yaml.Node, bool) {
	docs, err := yamlDocuments(data)
	if err != nil {
		p.yamlError(data, err)
		return nil, false
	}
	if len(docs) == 0 {
		return nil, true
	}
	// A second document would be silently ignored by a reader that takes
	// the first; say so instead. An empty trailing document (a final
	// "---") is harmless.
	for _, d := range docs[1:] {
		if !emptyDocument(d) {
			p.errorf(d.Line, "the rule file has more than one YAML document (separated by ---); put all rules in one document")
			break
		}
	}
	if len(docs[0].Content) == 0 {
		return nil, true
	}
	return docs[0].Content[0], true
}

// yamlDocuments returns the documents of data.
func yamlDocuments(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var d yaml.Node
		if err := dec.Decode(&d); err == io.EOF {
			return docs, nil
		} else if err != nil {
			return nil, err
		}
		docs = append(docs, &d)
	}
}

// emptyDocument reports whether doc holds nothing: no content, or only an
// implicit null.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null" && c.Value == ""
}

// yamlParserProblems are the messages of yaml's parser errors (see its
// parserc.go); its other errors come from the scanner. TestYAMLErrors
// produces each one, so that a yaml release that rewords one fails it.
// ("did not find expected <stream-start>" is left out: the scanner always
// starts with that token.)
var yamlParserProblems = map[string]bool{
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// yamlBlockProblems are the parser errors of a misindented line. yaml
// reports them on the line where the enclosing block starts, which can be
// far above the line to fix.
var yamlBlockProblems = map[string]bool{
	"did not find expected '-' indicator": true,
	"did not find expected key":           true,
}

// yamlProblemLine returns the line of a yamlBlockProblems error, errText,
// in data: the number of lines of the shortest prefix of data that fails
// with the same error. A block error is raised by the first token that
// does not fit, so the prefixes that end before that token's line parse
// or fail otherwise, and those that include it fail the same way; a binary
// search finds the boundary.
func yamlProblemLine(data []byte, errText string) int {
	ends := []int{}
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(k int) bool {
		_, err := yamlDocuments(data[:ends[k-1]])
		return err != nil && err.Error() == errText
	}
	lo, hi := 1, len(ends) // fails(hi) holds: it is the whole input
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

var (
	yamlLineError     = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	yamlUnknownAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)
)

// yamlError reports a syntax error from yaml, whose messages carry the
// line in their text (TestYAMLErrors pins the forms it reads).
func (p *parser) yamlError(data []byte, err error) {
	msg := err.Error()
	line := 0
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		switch {
		case yamlBlockProblems[msg]:
			line = yamlProblemLine(data, err.Error())
		case yamlParserProblems[msg]:
			// yaml numbers the lines of parser (as opposed to
			// scanner) errors from 0, and puts an error at the end of
			// the input on the line after the last.
			line = min(line+1, lastLine(data))
		}
	} else if m := yamlUnknownAnchor.FindStringSubmatch(msg); m != nil {
		line = lineOfText(data, "*"+m[1])
		msg = fmt.Sprintf("the alias *%s names no anchor &%s defined before it", m[1], m[1])
	} else {
		// The reader's errors (bad UTF-8, control characters) carry no
		// line.
		msg = strings.TrimPrefix(msg, "yaml: ")
		line = badCharLine(data)
	}
	p.errorf(line, "the file is not valid YAML: %s", msg)
}

// lineOfText returns the line of the first occurrence of s in data, or 0.
func lineOfText(data []byte, s string) int {
	i := bytes.Index(data, []byte(s))
	if i < 0 {
		return 0
	}
	return 1 + bytes.Count(data[:i], []byte{'\n'})
}

// lastLine returns the number of the last line of data that holds more
// than white space, at least 1.
func lastLine(data []byte) int {
	return 1 + bytes.Count(bytes.TrimRight(data, " \t\r\n"), []byte{'\n'})
}

// badCharLine returns the line of the first byte of data that is not
// UTF-8 or is a control character YAML does not allow, or 0.
func badCharLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == '\n':
			line++
		case r == utf8.RuneError && size == 1,
			r < 0x20 && r != '\t' && r != '\r',
			r >= 0x7f && r <= 0x9f && r != 0x85,
			r == 0xfffe || r == 0xffff:
			return line
		}
		i += size
	}
	return 0
}
