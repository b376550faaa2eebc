// Package rlsconfig reads the configuration format of envoyproxy/ratelimit
// (https://github.com/envoyproxy/ratelimit#configuration) as it is — a
// domain and nested descriptors with key, optional value and rate_limit —
// so that `gateway rls` serves the files users already have, plus a few
// extensions that choose this gateway's algorithms (docs/rls.md).
//
// It loads one file or a directory of files into an immutable Config,
// reports every problem with its file and line, and finds the limit of a
// request's descriptor the way envoyproxy/ratelimit does. It decides
// nothing and keeps no counters: that is internal/limit's job.
package rlsconfig

import (
	"fmt"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Config is a loaded set of domains. It is never modified after Load
// returns, so it is safe for concurrent use and is swapped whole on
// reload.
type Config struct {
	// Domains are the domains by name.
	Domains map[string]*Domain
	// Files are the files the config was read from, sorted by path.
	Files []File
	// SHA256 is the hex sha256 of the files' paths and contents, so that
	// a reload can tell whether anything changed.
	SHA256 string
}

// File is one file of a Config.
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Domain is one domain: the top of a descriptor tree.
type Domain struct {
	Name string
	// File is the file that declared the domain first.
	File string
	node
}

// node holds the descriptors under a domain or a descriptor.
type node struct {
	// exact are the descriptors by key and value (value "" for those
	// that set no value, which match any value).
	exact map[entry]*Descriptor
	// wildcards are the descriptors whose value ends in "*", in file
	// order: the first whose prefix matches wins.
	wildcards []*Descriptor
	// list is every child in file order, for /rules.
	list []*Descriptor
}

func (n *node) leaf() bool { return len(n.list) == 0 }

// entry is a key and value pair.
type entry struct{ key, value string }

// Descriptor is one configured descriptor.
type Descriptor struct {
	// Key and Value are as written; Value is "" when the descriptor
	// matches any value (each value then has its own counter).
	Key, Value string
	// Limit is the descriptor's rate_limit, nil if it sets none.
	Limit *Limit
	// ShadowMode reports whether the limit only reports its denials
	// (shadow_mode): it is counted, but never denies a request.
	ShadowMode bool
	// QuotaMode reports whether the limit is a quota (quota_mode, as
	// envoyproxy/ratelimit defines it): it is counted, and a request over
	// it is reported in the response's dynamic metadata, but its status is
	// OK and it never denies a request.
	QuotaMode bool
	// DetailedMetric reports whether the metrics of this descriptor's
	// limit carry the request's values (detailed_metric); by default
	// they carry only the configured path, which the config bounds.
	DetailedMetric bool
	// ValueToMetric reports value_to_metric: the metrics carry the
	// request's value for this level. Like DetailedMetric, it makes the
	// metric series as many as the values.
	ValueToMetric bool
	// ShareThreshold reports whether every value matching this wildcard
	// descriptor shares one counter (share_threshold).
	ShareThreshold bool
	// Path is the descriptor's place in its domain as the metrics name
	// it: "key_value.key" (levels joined by ".", a value after "_").
	Path string
	// Bounded reports whether the descriptor counts one fixed set of
	// values: every level from the domain down names a value, or a
	// wildcard whose values share a counter. Otherwise each value the
	// requests bring has its own counter, and those are as many as the
	// callers make them (a key budget applies).
	Bounded bool
	// File and Line locate the descriptor.
	File string
	Line int
	node
}

// wildcard reports whether d matches values by prefix.
func (d *Descriptor) wildcard() bool { return strings.HasSuffix(d.Value, "*") }

// Limit is a descriptor's rate_limit.
type Limit struct {
	// Name and Replaces are rate_limit's name and replaces: a limit whose
	// name another matched limit replaces is not applied.
	Name     string
	Replaces []string
	// Unlimited reports whether the descriptor is never limited.
	Unlimited bool
	// RequestsPerUnit and Unit are as written; Unit is UNKNOWN when
	// Unlimited.
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	// Params are the limit's settings for the limiter; zero when
	// Unlimited.
	Params limit.Params
}

// Units are the units of rate_limit, by name as written in lower case,
// and their lengths as envoyproxy/ratelimit counts them (a month is 30
// days, a year 365).
var units = map[string]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
	cal  limit.Calendar
}{
	"second": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second, ""},
	"minute": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute, ""},
	"hour":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour, ""},
	"day":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour, limit.CalendarDay},
	"week":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour, limit.CalendarWeek},
	"month":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour, limit.CalendarMonth},
	"year":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour, ""},
}

// UnitDuration returns the length of u as envoyproxy/ratelimit counts it,
// and whether u is a known unit.
func UnitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	for _, v := range units {
		if v.unit == u {
			return v.d, true
		}
	}
	return 0, false
}

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Match is the limit found for a request's descriptor.
type Match struct {
	// Descriptor is the configured descriptor that holds the limit.
	Descriptor *Descriptor
	// shared[i] is the wildcard value that entry i counts under instead
	// of its own value (share_threshold); nil when none does.
	shared []string
}

// CounterValue returns the value under which entry i of the request is
// counted: its own, or the wildcard pattern it shares (share_threshold).
func (m *Match) CounterValue(i int, own string) string {
	if i < len(m.shared) && m.shared[i] != "" {
		return m.shared[i]
	}
	return own
}

// Find returns the limit for entries in domain d as envoyproxy/ratelimit
// finds it: at each level the descriptor with the entry's key and value,
// else the first wildcard whose prefix the value has, else the one with
// the key and no value; the limit counts only if it is on the descriptor
// matched by the last entry. A request descriptor with more entries than
// the configured tree is deep matches nothing. ok is false when no limit
// applies.
func (d *Domain) Find(entries []Entry) (m Match, ok bool) {
	cur := &d.node
	for i, e := range entries {
		next := cur.exact[entry{e.Key, e.Value}]
		if next == nil {
			for _, w := range cur.wildcards {
				if w.Key == e.Key && strings.HasPrefix(e.Value, strings.TrimSuffix(w.Value, "*")) {
					next = w
					if w.ShareThreshold {
						if m.shared == nil {
							m.shared = make([]string, len(entries))
						}
						m.shared[i] = w.Value
					}
					break
				}
			}
		}
		if next == nil {
			next = cur.exact[entry{e.Key, ""}]
		}
		if next == nil {
			return Match{}, false
		}
		if i == len(entries)-1 {
			if next.Limit == nil {
				return Match{}, false
			}
			m.Descriptor = next
			return m, true
		}
		if next.leaf() {
			return Match{}, false
		}
		cur = &next.node
	}
	return Match{}, false
}

// Limits returns the number of descriptors with a rate_limit in c.
func (c *Config) Limits() int {
	n := 0
	var walk func(*node)
	walk = func(nd *node) {
		for _, d := range nd.list {
			if d.Limit != nil {
				n++
			}
			walk(&d.node)
		}
	}
	for _, d := range c.Domains {
		walk(&d.node)
	}
	return n
}

// Walk calls f for every descriptor of d, parents before children, in
// file order.
func (d *Domain) Walk(f func(*Descriptor)) {
	var walk func(*node)
	walk = func(nd *node) {
		for _, c := range nd.list {
			f(c)
			walk(&c.node)
		}
	}
	walk(&d.node)
}

// String describes l as the /rules view and logs show it.
func (l *Limit) String() string {
	if l.Unlimited {
		return "unlimited"
	}
	return fmt.Sprintf("%d/%s %s", l.RequestsPerUnit, strings.ToLower(l.Unit.String()), l.Params.Algorithm)
}
