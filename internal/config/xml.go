package config

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An xmlElement is the shape of one element of an XML rule file (the
// docs/rules.md, "Rule file"): its settings are attributes, and its lists are
// repeated child elements.
type xmlElement struct {
	// name is the element's name, for messages.
	name string
	// children are the elements it may hold.
	children []xmlChild
	// text reports whether it holds a value as text (<method>GET</method>)
	// rather than attributes and elements.
	text bool
}

// An xmlChild is an element that stands for one field of its parent.
type xmlChild struct {
	// name is the element's name.
	name string
	// field is the rule file's field the element stands for.
	field string
	// list reports whether each element is one entry of the field's list
	// (<config> of configs), rather than the field's whole value.
	list bool
	// attr reports whether the field may also be written as an attribute
	// (method="GET").
	attr bool
	elem *xmlElement
}

var (
	xmlText = &xmlElement{text: true}
	// A fixed cost is an attribute (cost="5"), a reported one an element
	// (<cost header="X-RateLimit-Cost" max="1000"/>).
	xmlCost = &xmlElement{name: "cost", children: []xmlChild{
		{name: "price", field: "price", list: true, elem: &xmlElement{name: "price"}},
	}}
	xmlCount = &xmlElement{name: "count", children: []xmlChild{
		{name: "status", field: "status", list: true, attr: true, elem: xmlText},
	}}
	xmlRule = &xmlElement{name: "limit", children: []xmlChild{
		{name: "method", field: "method", list: true, attr: true, elem: xmlText},
		{name: "cost", field: "cost", attr: true, elem: xmlCost},
		{name: "count", field: "count", elem: xmlCount},
	}}
	xmlApp = &xmlElement{name: "config", children: []xmlChild{
		{name: "limit", field: "limits", list: true, elem: xmlRule},
		{name: "key", field: "keys", list: true, elem: xmlText},
		{name: "cost", field: "cost", attr: true, elem: xmlCost},
		{name: "count", field: "count", elem: xmlCount},
	}}
	xmlUpstream = &xmlElement{name: "upstream", children: []xmlChild{
		{name: "target", field: "targets", list: true, elem: &xmlElement{name: "target"}},
		{name: "tls", field: "tls", elem: &xmlElement{name: "tls"}},
		{name: "healthCheck", field: "healthCheck", elem: &xmlElement{name: "healthCheck"}},
		{name: "outlier", field: "outlier", elem: &xmlElement{name: "outlier", children: []xmlChild{
			{name: "status", field: "statuses", list: true, attr: true, elem: xmlText},
		}}},
	}}
	xmlRoot = &xmlElement{name: "rules", children: []xmlChild{
		{name: "defaults", field: "defaults", elem: &xmlElement{name: "defaults"}},
		{name: "plan", field: "plans", list: true, elem: xmlPlan},
		{name: "config", field: "configs", list: true, elem: xmlApp},
		{name: "upstream", field: "upstreams", list: true, elem: xmlUpstream},
		{name: "route", field: "routes", list: true, elem: &xmlElement{name: "route"}},
	}}
	xmlPlan = &xmlElement{name: "plan", children: []xmlChild{
		{name: "limit", field: "limits", list: true, elem: xmlRule},
	}}
)

// The fields whose XML attribute values are always strings, and those that
// are true or false; the others are numbers when they look like one.
var (
	xmlStringFields = []string{"appId", "name", "model", "alerts", "plan", "body", "reserveHeader", "maxDelay", "api", "algorithm", "by", "missing", "method", "timezone", "header",
		"url", "balancing", "ca", "cert", "key", "serverName", "path", "host", "upstream"}
	xmlBoolFields = []string{"caseSensitive", "caseInsensitive", "shadow", "keep", "stripPrefix"}
	xmlNumber     = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)
)

// decodeXML parses data into the same node tree that decodeYAML builds,
// with line numbers, so that one walker validates every format. It returns
// the root node and whether data is well-formed XML.
//
// XML has no types: an attribute's value becomes a string, a number or a
// boolean by the field it sets (xmlStringFields, xmlBoolFields), so that
// appId="123" is the app "123" and limit="1.5" is reported as not a whole
// number, as in YAML and JSON.
func (p *parser) decodeXML(data []byte) (*yaml.Node, bool) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, true
	}
	// Check that the whole file is well-formed first, so that a syntax
	// error is reported alone, as YAML's and JSON's are.
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			line, _ := dec.InputPos()
			msg := strings.TrimPrefix(err.Error(), "xml: ")
			if se := (*xml.SyntaxError)(nil); errors.As(err, &se) {
				line, msg = se.Line, se.Msg
			}
			p.errorf(min(line, lastLine(data)), "the file is not valid XML: %s", msg)
			return nil, false
		}
	}
	b := &xmlBuilder{p: p, dec: xml.NewDecoder(bytes.NewReader(data)), data: data, line: 1}
	root, ok := b.document()
	return root, ok
}

// xmlBuilder turns the tokens of a well-formed XML rule file into a
// yaml.Node tree.
type xmlBuilder struct {
	p    *parser
	dec  *xml.Decoder
	data []byte
	// pos and line track the line of byte offset pos; offsets only grow.
	pos, line int
}

// lineAt returns the line of byte offset off, which is not before the
// offset of the previous call.
func (b *xmlBuilder) lineAt(off int) int {
	off = min(off, len(b.data))
	if off > b.pos {
		b.line += bytes.Count(b.data[b.pos:off], []byte{'\n'})
		b.pos = off
	}
	return b.line
}

// token returns the next token and the line where it starts. The input is
// well-formed, so the only error is the end of it.
func (b *xmlBuilder) token() (xml.Token, int, bool) {
	start := int(b.dec.InputOffset())
	tok, err := b.dec.Token()
	if err != nil {
		return nil, 0, false
	}
	// Character data starts with the white space that precedes a value;
	// its line is where its text starts.
	if cd, ok := tok.(xml.CharData); ok {
		start += len(cd) - len(bytes.TrimLeft(cd, " \t\r\n"))
	}
	return tok, b.lineAt(start), true
}

// document reads the root element and checks that nothing but comments
// and white space surround it. It reports false when the root element is
// not <rules>: what it holds cannot be read as rules.
func (b *xmlBuilder) document() (*yaml.Node, bool) {
	var root *yaml.Node
	good := true
	for {
		tok, line, ok := b.token()
		if !ok {
			return root, good
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch {
			case root != nil || !good:
				b.p.errorf(line, "the file has a second root element <%s>; put every rule inside the one <rules> element", t.Name.Local)
				b.dec.Skip()
			case t.Name.Local != xmlRoot.name:
				b.p.errorf(line, "the root element is <%s>; the rule file's root element must be <rules>", t.Name.Local)
				b.dec.Skip()
				good = false
			default:
				root = b.element(t, line, xmlRoot)
			}
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				b.p.errorf(line, "text outside the <rules> element; remove it")
			}
		}
	}
}

// element reads the rest of the element that start opened on line, of
// shape e, into a mapping node.
func (b *xmlBuilder) element(start xml.StartElement, line int, e *xmlElement) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line}
	b.attributes(n, start, line, e)
	lists := map[string]*yaml.Node{}
	textReported := false
	for {
		tok, tline, ok := b.token()
		if !ok {
			return n
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return n
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 && !textReported {
				textReported = true
				b.p.errorf(tline, "<%s> holds text; its settings are attributes (like <config appId=\"app-1\" limit=\"100\">), and its lists are elements", e.name)
			}
		case xml.StartElement:
			i := slices.IndexFunc(e.children, func(c xmlChild) bool { return c.name == t.Name.Local })
			if i < 0 {
				b.p.errorf(tline, "%s", unknownElement(t.Name.Local, e))
				b.dec.Skip()
				continue
			}
			c := e.children[i]
			var v *yaml.Node
			if c.elem.text {
				v = b.text(t, tline, c.field)
			} else {
				v = b.element(t, tline, c.elem)
			}
			if !c.list {
				n.Content = append(n.Content, xmlKey(c.field, tline), v)
				continue
			}
			seq, ok := lists[c.field]
			if !ok {
				seq = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: tline}
				lists[c.field] = seq
				n.Content = append(n.Content, xmlKey(c.field, tline), seq)
			}
			seq.Content = append(seq.Content, v)
		}
	}
}

// unknownElement says that <name> cannot be in e, suggesting what was
// probably meant.
func unknownElement(name string, e *xmlElement) string {
	var allowed []string
	for _, c := range e.children {
		allowed = append(allowed, c.name)
	}
	if len(allowed) == 0 {
		return fmt.Sprintf("unknown element <%s> in <%s>, which holds no elements: its settings are attributes", name, e.name)
	}
	msg := fmt.Sprintf("unknown element <%s> in <%s>", name, e.name)
	for _, a := range allowed {
		if editDistance(strings.ToLower(name), strings.ToLower(a)) < 3 {
			msg += fmt.Sprintf(" (did you mean <%s>?)", a)
			break
		}
	}
	return msg + "; the allowed elements are <" + strings.Join(allowed, ">, <") + ">, and settings are attributes"
}

// attributes adds the attributes of start, an element on line of shape e,
// to the mapping n as fields.
func (b *xmlBuilder) attributes(n *yaml.Node, start xml.StartElement, line int, e *xmlElement) {
	lines := b.attrLines()
	if len(lines) != len(start.Attr) {
		lines = nil // not expected of well-formed input
	}
	for i, a := range start.Attr {
		aline := line
		if lines != nil {
			aline = lines[i]
		}
		if a.Name.Space != "" || a.Name.Local == "xmlns" {
			// Namespace declarations and attributes in a namespace
			// (xsi:schemaLocation) are XML's, not settings.
			continue
		}
		name := a.Name.Local
		if i := slices.IndexFunc(e.children, func(c xmlChild) bool { return c.field == name }); i >= 0 && !e.children[i].attr {
			c := e.children[i]
			b.p.errorf(aline, "%s is not an attribute in XML; write each entry as a <%s> element inside <%s>", name, c.name, e.name)
			continue
		}
		n.Content = append(n.Content, xmlKey(name, aline), xmlScalar(name, a.Value, aline))
	}
}

// attrLines returns the line of each attribute of the start tag that was
// just read: the decoder gives the position of the
// tag's end only, and a tag may span lines.
func (b *xmlBuilder) attrLines() []int {
	// token has moved pos to the tag's '<'.
	base, end := b.pos, min(int(b.dec.InputOffset()), len(b.data))
	tag := b.data[base:end]
	if len(tag) == 0 || tag[0] != '<' {
		return nil
	}
	var lines []int
	i := 1
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for i < len(tag) && !isSpace(tag[i]) && tag[i] != '/' && tag[i] != '>' {
		i++ // the element's name
	}
	for {
		for i < len(tag) && isSpace(tag[i]) {
			i++
		}
		if i >= len(tag) || tag[i] == '/' || tag[i] == '>' {
			return lines
		}
		lines = append(lines, b.lineAt(base+i))
		for i < len(tag) && tag[i] != '"' && tag[i] != '\'' {
			i++ // the name and =
		}
		if i >= len(tag) {
			return lines
		}
		q := tag[i]
		i++
		for i < len(tag) && tag[i] != q {
			i++ // the value
		}
		i++
	}
}

// text reads the rest of a text element (<method>, <key>) that start
// opened on line, for field, into a string scalar.
func (b *xmlBuilder) text(start xml.StartElement, line int, field string) *yaml.Node {
	name := start.Name.Local
	for _, a := range start.Attr {
		if a.Name.Space == "" && a.Name.Local != "xmlns" {
			b.p.errorf(line, "<%s> takes no attributes; write its value as text, like <%s>…</%s>", name, name, name)
			break
		}
	}
	var text []byte
	for {
		tok, tline, ok := b.token()
		if !ok {
			break
		}
		if _, end := tok.(xml.EndElement); end {
			break
		}
		switch t := tok.(type) {
		case xml.CharData:
			text = append(text, t...)
		case xml.StartElement:
			b.p.errorf(tline, "<%s> holds only text (the %s), not an element <%s>", name, field, t.Name.Local)
			b.dec.Skip()
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.TrimSpace(string(text)), Line: line}
}

func xmlKey(name string, line int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Line: line}
}

// xmlScalar returns the value of the attribute field, typed as the field
// wants it when it looks the part, a string otherwise.
func xmlScalar(field, value string, line int) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, Line: line}
	v := strings.TrimSpace(value)
	switch {
	case slices.Contains(xmlStringFields, field):
	case slices.Contains(xmlBoolFields, field):
		if v == "true" || v == "false" {
			n.Tag, n.Value = "!!bool", v
		}
	case xmlNumber.MatchString(v):
		// Written out again, so that a leading zero is not read as
		// octal: 010 is ten, as a reader of the file expects.
		n.Tag, n.Value = "!!float", v
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			n.Tag, n.Value = "!!int", strconv.FormatInt(i, 10)
		}
	}
	return n
}
