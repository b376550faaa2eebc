package main

import (
	"fmt"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A testCase is a sequence of calls on one config, run under a domain of
// its own.
type testCase struct {
	name string
	// config is a file of -testdata, or a key of builtin.
	config string
	steps  []step
	// declared names, per mode ("compat", "default"), the row of
	// docs/rls.md's declared differences that explains how the case
	// differs; empty where it must not.
	declared map[string]string
}

// A step is a call, made times times (1 when 0).
type step struct {
	descs  []desc
	hits   uint32 // the request's hits_addend
	times  int
	domain string // a literal domain instead of the case's
	// noDomain sends the call without a domain.
	noDomain bool
}

type desc struct {
	entries [][2]string
	hits    *uint32
	limit   *rlv3.RateLimitDescriptor_RateLimitOverride
}

// d is a descriptor of key, value pairs.
func d(kv ...string) desc {
	var x desc
	for i := 0; i+1 < len(kv); i += 2 {
		x.entries = append(x.entries, [2]string{kv[i], kv[i+1]})
	}
	return x
}

// hitsAddend sets the descriptor's own hits_addend.
func (x desc) hitsAddend(n uint32) desc { x.hits = &n; return x }

// override sets the descriptor's limit override.
func (x desc) override(rpu uint32, unit typev3.RateLimitUnit) desc {
	x.limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return x
}

// call is a step of one call of ds, made times times.
func call(times int, ds ...desc) step { return step{descs: ds, times: times} }

// withHits sets the request's hits_addend.
func (s step) withHits(n uint32) step { s.hits = n; return s }

// in sends the step to a literal domain.
func (s step) in(domain string) step { s.domain = domain; return s }

// withoutDomain sends the step with an empty domain.
func (s step) withoutDomain() step { s.noDomain = true; return s }

func (s step) request(domain string) *rlsv3.RateLimitRequest {
	if s.noDomain {
		domain = ""
	}
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: s.hits}
	for _, x := range s.descs {
		pd := &rlv3.RateLimitDescriptor{Limit: x.limit}
		for _, e := range x.entries {
			pd.Entries = append(pd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		if x.hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(uint64(*x.hits))
		}
		req.Descriptors = append(req.Descriptors, pd)
	}
	return req
}

// describe renders the case's i-th call (from 0) for the report.
func (c testCase) describe(i int) string {
	for _, s := range c.steps {
		n := max(s.times, 1)
		if i >= n {
			i -= n
			continue
		}
		var parts []string
		for _, x := range s.descs {
			var es []string
			for _, e := range x.entries {
				es = append(es, e[0]+"="+e[1])
			}
			p := "[" + strings.Join(es, ",") + "]"
			if x.hits != nil {
				p += fmt.Sprintf(" hits %d", *x.hits)
			}
			if x.limit != nil {
				p += fmt.Sprintf(" override %d/%s", x.limit.GetRequestsPerUnit(), strings.ToLower(x.limit.GetUnit().String()))
			}
			parts = append(parts, p)
		}
		out := strings.Join(parts, " ")
		if s.hits != 0 {
			out += fmt.Sprintf(", request hits %d", s.hits)
		}
		if s.domain != "" {
			out += ", domain " + s.domain
		}
		return out
	}
	return "?"
}

// builtin are configs of keys that none of envoyproxy/ratelimit's own
// configs uses, written as its README documents them.
var builtin = map[string]string{
	"quota": `domain: quota
descriptors:
  - key: q
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: n
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qs
    quota_mode: true
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
`,
}

// rewrite returns the config src with its domain set to domain and, if
// fixed, algorithm: fixed_window on every rate_limit that is not
// unlimited.
func rewrite(src, domain string, fixed bool) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	root := doc.Content[0]
	found := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "domain" {
			root.Content[i+1].Value = domain
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("no domain")
	}
	if fixed {
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if k, v := n.Content[i], n.Content[i+1]; k.Value == "rate_limit" && v.Kind == yaml.MappingNode && !unlimited(v) {
						v.Content = append(v.Content,
							&yaml.Node{Kind: yaml.ScalarNode, Value: "algorithm"},
							&yaml.Node{Kind: yaml.ScalarNode, Value: "fixed_window"})
					}
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(root)
	}
	return yaml.Marshal(&doc)
}

func unlimited(rl *yaml.Node) bool {
	for i := 0; i+1 < len(rl.Content); i += 2 {
		if rl.Content[i].Value == "unlimited" && rl.Content[i+1].Value == "true" {
			return true
		}
	}
	return false
}

// Units of limit overrides.
const (
	second = typev3.RateLimitUnit_SECOND
	minute = typev3.RateLimitUnit_MINUTE
	hour   = typev3.RateLimitUnit_HOUR
)

// allCases are the calls of the run: every shape of descriptor the
// configs offer, each counted past its limit.
func allCases() []testCase {
	return []testCase{
		// basic_config.yaml: nested descriptors, defaults and values.
		{name: "nested key default", config: "basic_config.yaml", steps: []step{
			call(7, d("key1", "value1", "subkey1", "any")),
		}},
		{name: "nested key and value", config: "basic_config.yaml", steps: []step{
			call(12, d("key1", "value1", "subkey1", "subvalue1")),
		}},
		{name: "top level without limit", config: "basic_config.yaml", steps: []step{
			call(2, d("key1", "value1")),
		}},
		{name: "each value its counter", config: "basic_config.yaml", steps: []step{
			call(22, d("key2", "a")),
			call(2, d("key2", "b")),
		}},
		{name: "value override, hits_addend", config: "basic_config.yaml", steps: []step{
			call(4, d("key2", "value2")).withHits(10),
		}},
		{name: "value without limit", config: "basic_config.yaml", steps: []step{
			call(2, d("key2", "value3")),
		}},
		{name: "hour limit", config: "basic_config.yaml", steps: []step{
			call(3, d("key3", "x")),
		}},
		{name: "day limit with a name", config: "basic_config.yaml", steps: []step{
			call(3, d("key4", "x")),
		}},
		{name: "parent and child in one call", declared: map[string]string{"default": "decided together"}, config: "basic_config.yaml", steps: []step{
			call(3, d("key5", "value5"), d("key5", "value5", "subkey5", "subvalue5")).withHits(6),
		}},
		{name: "unlimited", config: "basic_config.yaml", steps: []step{
			call(2, d("key6", "x")),
		}},
		{name: "detailed metric", config: "basic_config.yaml", steps: []step{
			call(3, d("key7", "x")).withHits(30),
		}},
		{name: "deeper than the tree, unknown key, no entries", config: "basic_config.yaml", steps: []step{
			call(2, d("key2", "x", "extra", "y")),
			call(1, d("nokey", "x")),
			call(1, d()),
		}},
		{name: "one descriptor denies, another admits", declared: map[string]string{"default": "decided together"}, config: "basic_config.yaml", steps: []step{
			call(3, d("key3", "a"), d("key2", "a")),
		}},
		{name: "repeated descriptor", config: "basic_config.yaml", steps: []step{
			call(12, d("key2", "r"), d("key2", "r")),
		}},
		{name: "repeats that go over together", declared: map[string]string{"default": "repeats over the limit"}, config: "basic_config.yaml", steps: []step{
			call(1, d("key2", "rr").hitsAddend(19)),
			call(1, d("key2", "rr"), d("key2", "rr")),
		}},
		{name: "hits_addend 0", declared: map[string]string{"default": "hits_addend 0"}, config: "basic_config.yaml", steps: []step{
			call(1, d("key3", "z").hitsAddend(0)),
			call(1, d("key3", "z")),
			call(1, d("key3", "z").hitsAddend(0)),
			call(1, d("key3", "z")),
			call(1, d("key3", "z").hitsAddend(0)),
		}},
		{name: "descriptor hits_addend over the request's", declared: map[string]string{"default": "decided together"}, config: "basic_config.yaml", steps: []step{
			call(3, d("key2", "h").hitsAddend(1), d("key2", "i")).withHits(8),
		}},
		{name: "can never fit", declared: map[string]string{"default": "denied not counted"}, config: "basic_config.yaml", steps: []step{
			call(2, d("key2", "big").hitsAddend(25)),
			call(2, d("key2", "big")),
		}},
		{name: "override shares the configured counter", declared: map[string]string{"default": "denied not counted"}, config: "basic_config.yaml", steps: []step{
			call(7, d("key2", "ov").override(5, minute)),
			call(2, d("key2", "ov")),
		}},
		{name: "override of another unit", declared: map[string]string{"default": "reset"}, config: "basic_config.yaml", steps: []step{
			call(2, d("key2", "ou")),
			call(4, d("key2", "ou").override(3, second)),
			call(1, d("key2", "ou")),
		}},
		{name: "override on entries that match nothing", declared: map[string]string{"default": "reset"}, config: "basic_config.yaml", steps: []step{
			call(3, d("nomatch", "x").override(2, minute)),
		}},
		{name: "override on an unlimited descriptor", declared: map[string]string{"default": "reset"}, config: "basic_config.yaml", steps: []step{
			call(3, d("key6", "x").override(2, minute)),
		}},
		{name: "invalid calls", declared: map[string]string{"compat": "invalid argument", "default": "invalid argument"}, config: "basic_config.yaml", steps: []step{
			call(1, d("key2", "x")).withoutDomain(),
			call(1),
		}},
		{name: "unknown domain, with an override", config: "basic_config.yaml", steps: []step{
			call(2, d("key2", "x")).in("no-such-domain"),
			call(2, d("key2", "x").override(1, minute)).in("no-such-domain"),
		}},

		// shadowmode_config.yaml
		{name: "shadow limit", config: "shadowmode_config.yaml", steps: []step{
			call(12, d("key1", "value1", "subkey1", "subvalue1")),
		}},
		{name: "shadow default", config: "shadowmode_config.yaml", steps: []step{
			call(2, d("key2", "s")).withHits(15),
		}},
		{name: "shadow and enforced in one call", config: "shadowmode_config.yaml", steps: []step{
			call(3, d("key2", "t").hitsAddend(12), d("key2", "value2").hitsAddend(12)),
		}},
		{name: "shadow value under an enforced default", config: "shadowmode_config.yaml", steps: []step{
			call(7, d("key1", "value1", "subkey1", "x")),
		}},

		// examples/example.yaml: replaces, banned, shadow, unlimited.
		{name: "replaced by name", config: "examples/example.yaml", steps: []step{
			call(6, d("category", "account"), d("foo", "f", "bar", "bkthomps")),
		}},
		{name: "replacing limit alone", config: "examples/example.yaml", steps: []step{
			call(3, d("source_cluster", "proxy", "destination_cluster", "bkthomps"), d("foo", "f", "bar", "bkthomps")),
		}},
		{name: "limit of 0", config: "examples/example.yaml", steps: []step{
			call(2, d("foo", "f", "bar", "banned")),
		}},
		{name: "limit of 0 replaced", config: "examples/example.yaml", steps: []step{
			call(2, d("foo", "f", "bar", "banned"), d("source_cluster", "proxy", "destination_cluster", "override")),
		}},
		{name: "parent with limit, child without value", config: "examples/example.yaml", steps: []step{
			call(4, d("foo", "f")),
			call(5, d("foo", "f", "bar", "other")),
		}},
		{name: "per second child", config: "examples/example.yaml", steps: []step{
			call(3, d("foo", "f", "baz", "x")),
		}},
		{name: "shadow child", config: "examples/example.yaml", steps: []step{
			call(5, d("foo", "f", "baz", "shady")),
			call(5, d("foo", "f", "baz", "not-so-shady")),
		}},
		{name: "unlimited child and top", config: "examples/example.yaml", steps: []step{
			call(2, d("foo", "f", "bay", "x"), d("qux", "y")),
		}},
		{name: "named limit replaced in one call", config: "examples/example.yaml", steps: []step{
			call(4, d("source_cluster", "proxy", "destination_cluster", "fake"), d("category", "account")),
		}},
		{name: "one a minute", config: "examples/example.yaml", steps: []step{
			call(3, d("source_cluster", "proxy", "destination_cluster", "mock")),
			call(3, d("unspec", "u")),
		}},

		// wildcard.yaml
		{name: "trailing wildcard, each value its counter", config: "wildcard.yaml", steps: []step{
			call(21, d("wild", "foo1")),
			call(2, d("wild", "foobar")),
			call(1, d("wild", "foo")),
			call(1, d("wild", "fo")),
		}},
		{name: "no wildcard", config: "wildcard.yaml", steps: []step{
			call(2, d("noWild", "foo")),
			call(1, d("noWild", "foo1")),
		}},
		{name: "star inside a value is literal", config: "wildcard.yaml", steps: []step{
			call(2, d("midWild", "bar*b")),
			call(1, d("midWild", "barXb")),
		}},
		{name: "nested wildcard", config: "wildcard.yaml", steps: []step{
			call(3, d("nestedWild", "val1", "wild", "goo5")).withHits(9),
		}},
		{name: "key without value", config: "wildcard.yaml", steps: []step{
			call(21, d("noVal", "anything")),
		}},

		// share_threshold.yaml
		{name: "shared wildcard", config: "share_threshold.yaml", steps: []step{
			call(2, d("files", "files/a")).withHits(30),
			call(2, d("files", "files/b")).withHits(30),
		}},
		{name: "shared nested wildcard", config: "share_threshold.yaml", steps: []step{
			call(2, d("nested", "parent", "files", "nested/x")).withHits(60),
			call(2, d("nested", "parent", "files", "nested/y")).withHits(60),
		}},
		{name: "same key at two levels", config: "share_threshold.yaml", steps: []step{
			call(2, d("files", "top/1", "files", "nested/2")).withHits(100),
			call(2, d("files", "top/3", "files", "nested/4")).withHits(100),
		}},
		{name: "shared parent, counted child", config: "share_threshold.yaml", steps: []step{
			call(2, d("route", "api/v1", "method", "GET")).withHits(20),
			call(2, d("route", "api/v2", "method", "GET")).withHits(20),
			call(1, d("route", "api/v2", "method", "POST")).withHits(20),
		}},
		{name: "shared parent, detailed child", config: "share_threshold.yaml", steps: []step{
			call(3, d("service", "svc/a", "endpoint", "e")).withHits(30),
		}},
		{name: "shared and unshared wildcards", config: "share_threshold.yaml", steps: []step{
			call(2, d("path", "path/a", "file", "file/x", "type", "t")).withHits(50),
			call(2, d("path", "path/b", "file", "file/x", "type", "t")).withHits(50),
			call(1, d("path", "path/b", "file", "file/y", "type", "t")).withHits(50),
		}},
		{name: "two shared wildcards", config: "share_threshold.yaml", steps: []step{
			call(2, d("user", "user/1", "resource", "res/1", "action", "read")).withHits(60),
			call(2, d("user", "user/2", "resource", "res/2", "action", "read")).withHits(60),
		}},
		{name: "value before wildcard", config: "share_threshold.yaml", steps: []step{
			call(2, d("file", "test1")).withHits(30),
			call(3, d("file", "test2")).withHits(40),
			call(1, d("file", "testX")).withHits(40),
		}},
		{name: "override on a shared wildcard", declared: map[string]string{"default": "reset"}, config: "share_threshold.yaml", steps: []step{
			call(2, d("files", "files/o1").override(3, minute)),
			call(2, d("files", "files/o2").override(3, minute)),
			call(1, d("files", "files/o3")),
		}},

		// examples/config.yaml and the integration tests' configs.
		{name: "500 a second", config: "examples/config.yaml", steps: []step{
			call(3, d("database", "users")).withHits(200),
			call(1, d("database", "default")).withHits(501),
		}},
		{name: "50 a second", config: "integration/basic.yaml", steps: []step{
			call(4, d("key1", "k")).withHits(20),
		}},
		{name: "one per minute", config: "integration/basic.yaml", steps: []step{
			call(3, d("one_per_minute", "m")),
		}},
		{name: "limit of 0 a second", declared: map[string]string{"compat": "limit 0, hits_addend 0"}, config: "integration/reload.yaml", steps: []step{
			call(1, d("block", "b")),
			call(1, d("block", "b").hitsAddend(0)),
		}},
		{name: "hour and day", declared: map[string]string{"default": "decided together"}, config: "integration/another.yaml", steps: []step{
			call(3, d("key3", "h"), d("key4", "d")).withHits(5),
		}},
		{name: "wildcard without sharing", config: "integration/share_threshold.yaml", steps: []step{
			call(2, d("files_no_share", "files_no_share/a")).withHits(6),
			call(2, d("files", "files/a")).withHits(6),
		}},

		// quota_mode, as envoyproxy/ratelimit's README has it.
		{name: "quota", config: "quota", steps: []step{
			call(5, d("q", "a")),
		}},
		{name: "quota and a limit", declared: map[string]string{"default": "decided together"}, config: "quota", steps: []step{
			call(4, d("q", "b"), d("n", "b")),
		}},
		{name: "quota in shadow mode", config: "quota", steps: []step{
			call(3, d("qs", "c")),
		}},
	}
}
