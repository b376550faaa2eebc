package rlsconfig

import (
	"strings"
	"testing"
)

// TestFind walks envoyproxy/ratelimit's own configurations as its README
// describes the matching: key and value first, then a wildcard, then the
// key alone; the limit must be on the last entry's descriptor.
func TestFind(t *testing.T) {
	t.Parallel()
	load := func(path string) *Config {
		c, err := Load(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	basic := load(upstream + "basic_config.yaml").Domains["test-domain"]
	wild := load(upstream + "wildcard.yaml").Domains["test-domain"]
	share := load(upstream + "share_threshold.yaml").Domains["test-domain"]
	rl := load(upstream + "examples").Domains["rl"]
	for _, tc := range []struct {
		name    string
		domain  *Domain
		entries string // "k=v,k=v"
		want    string // the matched descriptor's path, "" for none
		shared  string // entry values after share_threshold, "," joined
	}{
		{"key only default", basic, "key2=anything", "key2", ""},
		{"value beats key only", basic, "key2=value2", "key2_value2", ""},
		{"value without limit whitelists", basic, "key2=value3", "", ""},
		{"nested default", basic, "key1=value1,subkey1=x", "key1_value1.subkey1", ""},
		{"nested value", basic, "key1=value1,subkey1=subvalue1", "key1_value1.subkey1_subvalue1", ""},
		{"parent without limit", basic, "key1=value1", "", ""},
		{"unknown top value", basic, "key1=other,subkey1=x", "", ""},
		{"deeper than config", basic, "key3=a,extra=b", "", ""},
		{"parent limit with child request", basic, "key5=value5", "key5_value5", ""},
		{"child", basic, "key5=value5,subkey5=subvalue5", "key5_value5.subkey5_subvalue5", ""},
		{"unknown key", basic, "nokey=1", "", ""},
		{"empty value matches key only", basic, "key2=", "key2", ""},
		// A "*" inside a value is no wildcard, as envoyproxy/ratelimit's
		// TestWildcardConfig has it: only a trailing "*" matches by prefix.
		{"star inside a value is literal", wild, "midWild=barab", "", ""},
		{"star inside a value matches itself", wild, "midWild=bar*b", "midWild_bar*b", ""},
		{"wildcard", wild, "wild=foobar", "wild_foo*", ""},
		{"wildcard prefix itself", wild, "wild=foo", "wild_foo*", ""},
		{"wildcard miss", wild, "wild=fo", "", ""},
		{"star inside is literal", wild, "midWild=barXb", "", ""},
		{"star inside exact", wild, "midWild=bar*b", "midWild_bar*b", ""},
		{"nested wildcard", wild, "nestedWild=val1,wild=goober", "nestedWild_val1.wild_goo*", ""},
		{"share threshold", share, "files=files/a.txt", "files_files/*", "files/*"},
		{"exact beats shared wildcard", share, "file=test1", "file_test1", ""},
		{"shared wildcard", share, "file=test2", "file_test*", "test*"},
		{"two shared levels", share, "user=user/1,resource=res/2,action=get", "user_user/*.resource_res/*.action", "user/*,res/*,get"},
		{"mixed share", share, "path=path/x,file=file/y,type=t", "path_path/*.file_file/*.type", "path/*,file/y,t"},
		{"example replaces", rl, "source_cluster=proxy,destination_cluster=bkthomps", "source_cluster_proxy.destination_cluster_bkthomps", ""},
		{"example default child", rl, "foo=1,bar=2", "foo.bar", ""},
		{"example unlimited", rl, "foo=1,bay=2", "foo.bay", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var entries []Entry
			for _, kv := range strings.Split(tc.entries, ",") {
				k, v, _ := strings.Cut(kv, "=")
				entries = append(entries, Entry{k, v})
			}
			m, ok := tc.domain.Find(entries)
			got := ""
			if ok {
				got = m.Descriptor.Path
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if tc.shared != "" {
				var vals []string
				for i, e := range entries {
					vals = append(vals, m.CounterValue(i, e.Value))
				}
				if g := strings.Join(vals, ","); g != tc.shared {
					t.Errorf("counter values: got %q, want %q", g, tc.shared)
				}
			}
		})
	}
}
