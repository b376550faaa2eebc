package config

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// FuzzParse checks that Parse never panics, that it either returns rules
// or Errors, and that the rules it returns are usable: every Params
// passes Validate, every pattern is canonical, every method list is
// sorted upper-case tokens without repeats.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/rules.yaml", "testdata/rules.json", "testdata/invalid.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, name == "testdata/rules.json")
	}
	for _, s := range []string{
		"",
		"configs: [{appId: a, limits: [{api: /, limit: 1}]}]",
		"configs: [{appId: '*', by: global, limit: 5, unit: 500ms}]",
		"defaults: {unit: 1m, precision: 60}\nconfigs:\n- appId: a\n  limits:\n  - {api: /v1/{id}, method: [get, POST], limit: 10}\n",
		"configs:\n- appId: a\n  limits: &l\n  - &r {api: /x, limit: 1}\n  - <<: *r\n    api: /y\n- appId: b\n  limits: *l\n",
		"configs: [{appId: a, limits: [{api: /, limit: 1.5, unit: 1.5}]}]",
		"configs:\n  - appId: a\n    limits: [{api: /, limit: 1}\n",
		"a: 1\n---\nb: 2\n",
		"configs:\n- &a {appId: a, <<: *a}\n",
		"configs:\n- appId: a\n  keys: [9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A0g, x]\n  limit: 1\n",
		routesYAML,
		"upstreams: [{name: a, targets: [http://x, {url: 'http://y', weight: 2}], healthCheck: {interval: 1s}}]\nroutes: [{host: '*.a.b', path: /v1/{id}, upstream: a, stripPrefix: true}]\nconfigs: [{appId: a, limit: 1}]\n",
		"defaults: {algorithm: token_bucket, burst: 5, warmup: 10s, lockSeconds: 30}\nconfigs:\n- appId: a\n  limit: 9\n  limits:\n  - {api: /a, limit: 3, algorithm: leaky_bucket}\n  - {api: /b, limit: 3, algorithm: sliding_log, lockSeconds: 0}\n  - {api: /c, limit: 3, algorithm: fixed_window}\n",
	} {
		f.Add([]byte(s), false)
	}
	for _, s := range []string{
		`{"configs": [{"appId": "a", "limits": [{"api": "/", "limit": 1}]}]}`,
		`{"configs": [{"appId": "a", "limits": [{"api": "\/v1", "method": "get", "limit": 1e3, "unit": "1s"}]}]}`,
		`{"configs": [{"appId": "a", "appId": "b"}]}`,
		`{"configs": [`,
		`[1, 2, 3]`,
		routesJSON,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		name := "f.yaml"
		if isJSON {
			name = "f.json"
		}
		r, err := Parse(name, data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Parse error %v (%T): want a non-empty Errors", err, err)
			}
			if r != nil {
				t.Fatalf("Parse returned rules and an error")
			}
			for _, e := range errs {
				if e.Line < 0 || e.Msg == "" || e.File != name {
					t.Fatalf("Parse error %+v: want the file, a line ≥ 0 and a message", *e)
				}
			}
			return
		}
		checkRules(t, r)
	})
}

// checkRules fails t unless the rules Parse returned are usable: every
// Params passes Validate, every pattern is canonical, every method list
// is sorted upper-case tokens without repeats, and the proxy's trie takes
// every rule.
func checkRules(t *testing.T, r *Rules) {
	t.Helper()
	if len(r.Apps) == 0 {
		t.Fatalf("Parse returned no apps and no error")
	}
	ids := map[string]bool{}
	for _, app := range r.Apps {
		if (app.ID != UnknownApp && !ValidAppID(app.ID)) || ids[app.ID] {
			t.Fatalf("app ID %q is invalid or repeated", app.ID)
		}
		ids[app.ID] = true
		if app.By == "" {
			t.Fatalf("app %q: by %q", app.ID, app.By)
		}
		if app.Keys != nil && (app.ID == UnknownApp || len(app.Keys) == 0) {
			t.Fatalf("app %q: keys %x", app.ID, app.Keys)
		}
		for i := range app.Keys {
			if slices.Contains(app.Keys[:i], app.Keys[i]) {
				t.Fatalf("app %q: key digest %x is repeated", app.ID, app.Keys[i])
			}
		}
		if app.Total != nil {
			if err := app.Total.Validate(); err != nil {
				t.Fatalf("app %q total %+v: %v", app.ID, *app.Total, err)
			}
		}
		tr := trie.New[int](trie.Options{CaseInsensitive: r.CaseInsensitive})
		for _, rule := range app.Limits {
			if err := rule.Params.Validate(); err != nil {
				t.Fatalf("app %q rule %s %+v: %v", app.ID, rule.API, rule.Params, err)
			}
			canonical, _, err := trie.ParsePattern(rule.API)
			if err != nil || canonical != rule.API {
				t.Fatalf("app %q rule api %q: canonical %q, %v", app.ID, rule.API, canonical, err)
			}
			if !slices.IsSorted(rule.Methods) || len(slices.Compact(slices.Clone(rule.Methods))) != len(rule.Methods) {
				t.Fatalf("app %q rule %s: methods %q are not sorted and unique", app.ID, rule.API, rule.Methods)
			}
			for _, m := range rule.Methods {
				if c, err := trie.ParseMethod(m); err != nil || c != m {
					t.Fatalf("app %q rule %s: method %q: %q, %v", app.ID, rule.API, m, c, err)
				}
			}
			// What Parse accepts, the proxy's trie accepts.
			if err := tr.Insert(rule.API, rule.Methods, 0); err != nil {
				t.Fatalf("app %q rule %s %q: %v", app.ID, rule.API, rule.Methods, err)
			}
		}
	}
}

// FuzzParseXML checks that Parse never panics on an XML file, that every
// problem it reports has a line within the file, and that the rules it
// returns are usable (checkRules).
func FuzzParseXML(f *testing.F) {
	for _, name := range []string{"testdata/demo-rules.xml", "testdata/formats/invalid.xml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		`<rules><config appId="a"><limit api="/" limit="1"/></config></rules>`,
		`<rules caseSensitive="true"><defaults unit="1m" precision="60"/><config appId="*" by="global" limit="5" unit="500ms"/></rules>`,
		"<rules>\n<config appId=\"a\"\n limit=\"1\"\n limt=\"2\"/>\n</rules>",
		`<rules><config appId="a"><limit api="/v1/{id}" limit="10" method="get"><method>POST</method><method><x/></method></limit></config></rules>`,
		`<rules><config appId="a" limits="x" limit="010"><key>9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08</key><key a="1">x</key></config></rules>`,
		`<?xml version="1.0"?><!DOCTYPE rules><rules xmlns="urn:x"><!-- c --><![CDATA[x]]></rules><rules/>`,
		"<rules>\n<config appId=\"a&amp;\">\n<limit api=\"/\"",
		`<configs><config appId="a" limit="1"/></configs>`,
		routesXML,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "f.xml"
		r, err := Parse(name, data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Parse error %v (%T): want a non-empty Errors", err, err)
			}
			if r != nil {
				t.Fatalf("Parse returned rules and an error")
			}
			lines := 1 + bytes.Count(data, []byte{'\n'})
			for _, e := range errs {
				if e.Line < 0 || e.Line > lines || e.Msg == "" || e.File != name {
					t.Fatalf("Parse error %+v: want the file, a line in 0..%d and a message", *e, lines)
				}
			}
			return
		}
		checkRules(t, r)
	})
}
