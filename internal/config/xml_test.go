package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFormatsReportAlike checks that one set of problems, written in YAML,
// JSON and XML with each problem on the same line, gives the same
// messages on the same lines in all three.
func TestFormatsReportAlike(t *testing.T) {
	t.Parallel()
	msgs := func(path string) []string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(path, data)
		var errs Errors
		if !errors.As(err, &errs) {
			t.Fatalf("Parse %s: got %v, want Errors", path, err)
		}
		var out []string
		for _, e := range errs {
			e2 := *e
			e2.File = ""
			out = append(out, e2.Error())
		}
		return out
	}
	want := msgs("testdata/formats/invalid.yaml")
	if len(want) != 8 {
		t.Errorf("invalid.yaml: got %d problems, want 8:\n%s", len(want), strings.Join(want, "\n"))
	}
	for _, f := range []string{"invalid.json", "invalid.xml"} {
		if got := msgs(filepath.Join("testdata/formats", f)); !slices.Equal(got, want) {
			t.Errorf("%s: got\n%s\nwant (as invalid.yaml)\n%s", f, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestXMLErrors checks the problems only XML has, and that each is on the
// line of the element or attribute it is about, also in a tag that spans
// lines.
func TestXMLErrors(t *testing.T) {
	t.Parallel()
	const ok = `<config appId="a"><limit api="/" limit="1"/></config>`
	tests := []struct {
		name string
		data string
		want []string // "line: the start of the message", in order
	}{
		{
			name: "syntax error",
			data: "<rules>\n<config appId=\"a\">\n<limit api=\"/\" limit=\"1\">\n</config>\n</rules>\n",
			want: []string{"4: the file is not valid XML: element <limit> closed by </config>"},
		},
		{
			name: "unclosed at the end",
			data: "<rules>\n" + ok + "\n",
			want: []string{"2: the file is not valid XML: unexpected EOF"},
		},
		{
			name: "unknown entity",
			data: "<rules>\n<config appId=\"a&nbsp;\" limit=\"1\"/>\n</rules>",
			want: []string{"2: the file is not valid XML: invalid character entity &nbsp;"},
		},
		{
			name: "unknown attribute in a tag over lines",
			data: "<rules>\n  <config appId=\"a\"\n      limit=\"1\"\n      limt=\"2\"/>\n</rules>",
			want: []string{`4: unknown field "limt" in this app section (did you mean "limit"?)`},
		},
		{
			name: "unknown element",
			data: "<rules>\n<config appId=\"a\">\n<limits api=\"/\" limit=\"1\"/>\n</config>\n</rules>",
			want: []string{
				"2: this app section has neither limit nor limits",
				"3: unknown element <limits> in <config> (did you mean <limit>?); the allowed elements are <limit>, <key>",
			},
		},
		{
			name: "a list as an attribute",
			data: "<rules>\n<config appId=\"a\" limit=\"1\"\n limits=\"x\"/>\n</rules>",
			want: []string{"3: limits is not an attribute in XML; write each entry as a <limit> element inside <config>"},
		},
		{
			name: "text in a section",
			data: "<rules>\n<config appId=\"a\" limit=\"1\">\n  limit 5\n</config>\n</rules>",
			want: []string{"3: <config> holds text; its settings are attributes"},
		},
		{
			name: "wrong root",
			data: "<?xml version=\"1.0\"?>\n<configs>" + ok + "</configs>",
			want: []string{"2: the root element is <configs>; the rule file's root element must be <rules>"},
		},
		{
			name: "second root",
			data: "<rules>" + ok + "</rules>\n<rules/>\n",
			want: []string{"2: the file has a second root element <rules>"},
		},
		{
			name: "text after the root",
			data: "<rules>" + ok + "</rules>\nlimit=5\n",
			want: []string{"2: text outside the <rules> element"},
		},
		{
			name: "element in a method",
			data: "<rules><config appId=\"a\"><limit api=\"/\" limit=\"1\">\n<method><get/></method></limit></config></rules>",
			want: []string{
				"2: <method> holds only text (the method), not an element <get>",
				`2: method "" is not a valid HTTP method`,
			},
		},
		{
			name: "types by field",
			data: "<rules>\n<config appId=\"a\">\n<limit api=\"/\" limit=\"1.5\"/>\n<limit api=\"/b\" limit=\"ten\"/>\n" +
				"<limit api=\"/c\" limit=\"1\" shadow=\"yes\"/>\n<limit api=\"/d\" limit=\"1\" unit=\"60\" warmup=\"30\" algorithm=\"token_bucket\"/>\n</config>\n</rules>",
			want: []string{
				"3: limit must be a whole number, not 1.5",
				`4: limit must be a whole number, not the string "ten"`,
				`5: shadow must be true or false, not the string "yes"`,
				`6: warmup 30 has no time unit`,
			},
		},
		{
			name: "empty",
			data: "<?xml version=\"1.0\"?>\n<!-- nothing -->\n",
			want: []string{"0: the rule file has no configs"},
		},
		{
			name: "empty root",
			data: "\n<rules/>\n",
			want: []string{"0: the rule file has no configs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("r.xml", []byte(tt.data))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse: got %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, strconv.Itoa(e.Line)+": "+e.Msg)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, g := range got {
				if !strings.HasPrefix(g, tt.want[i]) {
					t.Errorf("problem %d: got %q, want it to start %q", i, g, tt.want[i])
				}
			}
		})
	}
}

// TestXMLValues checks how attribute values are read: strings where the
// field is a string (appId="123"), numbers written out in decimal (010 is
// ten, not octal eight), namespaces ignored.
func TestXMLValues(t *testing.T) {
	t.Parallel()
	data := `<?xml version="1.0" encoding="UTF-8"?>
<rules xmlns="urn:example:rules" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:noNamespaceSchemaLocation="rules.xsd" caseSensitive="true">
  <config appId="123" limit="010" unit=" 60 "/>
  <config appId="*"><limit api="/a" limit="1e3" method="get"/><limit api="/b" limit="2"><method> POST </method><method>put</method></limit></config>
</rules>`
	r, err := Parse("r.xml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if r.CaseInsensitive {
		t.Errorf("CaseInsensitive: got true, want false")
	}
	a := r.Apps[0]
	if a.ID != "123" || a.Total == nil || a.Total.Limit != 10 || a.Total.Window.Seconds() != 60 {
		t.Errorf("app: got %+v (total %+v), want 123 with 10 per minute", a, a.Total)
	}
	rules := r.Apps[1].Limits
	if rules[0].Params.Limit != 1000 || !slices.Equal(rules[0].Methods, []string{"GET"}) {
		t.Errorf("rule /a: got %+v, want 1000 for GET", rules[0])
	}
	if !slices.Equal(rules[1].Methods, []string{"POST", "PUT"}) {
		t.Errorf("rule /b methods: got %q, want POST PUT", rules[1].Methods)
	}
}
