package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Upstream is one named pool of targets that routes send requests to (the
// docs' routes.md).
type Upstream struct {
	// Name is what routes call the upstream by; unique in the file.
	Name string
	// Targets are the pool's servers, in file order. They share a scheme
	// and a path: a request goes to one of them, retried on another only
	// when nothing reached the first.
	Targets []Target
	// TLS, for https targets, sets the CA, the client certificate and
	// the server name; nil means the system roots, no client certificate
	// and each target's host as the server name.
	TLS *UpstreamTLS
	// Balancing is how a target is chosen: BalanceLeastRequest (the
	// default) or BalanceRoundRobin.
	Balancing string
	// HealthCheck, when not nil, probes each target actively.
	HealthCheck *HealthCheck
	// Outlier, when not nil, replaces the gateway's passive ejection
	// settings for this upstream.
	Outlier *Outlier
	// Line is where the upstream starts in the file.
	Line int
}

// Target is one server of an upstream.
type Target struct {
	// URL is the target's base URL: http, https or h2c (HTTP/2 without
	// TLS, with prior knowledge: gRPC servers), a host, and the path
	// prefix its pool shares.
	URL *url.URL
	// Weight is the target's share of the pool's requests relative to
	// the others': 1..MaxWeight, default 1.
	Weight int
	// Line is where the target is written.
	Line int
}

// UpstreamTLS is how the gateway speaks TLS to an upstream's targets.
// The files are read again when they change.
type UpstreamTLS struct {
	// CA is a PEM file of the roots that the targets' certificates must
	// chain to; "" means the system roots.
	CA string
	// Cert and Key are the PEM files of the client certificate (mTLS);
	// both or neither.
	Cert, Key string
	// ServerName is the name sent in SNI and checked against the
	// targets' certificates; "" means each target's host.
	ServerName string
	// Line is where the tls section starts.
	Line int
}

// HealthCheck is an upstream's active health check: each target is asked
// GET Path every Interval; Unhealthy failures in a row take it out of the
// pool, Healthy successes in a row bring it back.
type HealthCheck struct {
	// Path is the path probed, below the targets' shared path. Default
	// "/".
	Path string
	// Interval is the time between probes of a target. Default 10s.
	Interval time.Duration
	// Timeout bounds one probe. Default 2s; at most Interval.
	Timeout time.Duration
	// Healthy and Unhealthy are the successes and failures in a row
	// that change a target's state. Defaults 2 and 3.
	Healthy, Unhealthy int
	// Line is where the section starts.
	Line int
}

// Outlier is how failed requests take a target out of its pool: Failures
// in a row (connection failures, timeouts, and responses with one of
// Statuses) eject it for Ejection, doubled at each ejection that follows
// another without a success between them, up to MaxEjection; within
// bounds that keep one caller from emptying the pool (MaxEjectionPercent,
// PanicThreshold).
type Outlier struct {
	// Failures is 1..1000, default 5.
	Failures int
	// Ejection and MaxEjection default to 10s and 5m.
	Ejection, MaxEjection time.Duration
	// MaxEjectionPercent is the most of the pool's targets, in percent,
	// held out by ejection at once, though at least one (never the last
	// target in the pool): 1..100, default DefaultMaxEjectionPercent.
	MaxEjectionPercent int
	// PanicThreshold is the percentage of the pool's targets below which
	// the pool, having fewer in it, sends requests to its ejected targets
	// as well: 0..100, 0 turning it off; default DefaultPanicThreshold.
	PanicThreshold int
	// Statuses are the response statuses (5xx only) that count as
	// failures; nil, the default, counts none.
	Statuses []StatusRange
	// Line is where the section starts.
	Line int
}

// The balancing policies of an upstream.
const (
	BalanceLeastRequest = "least-request"
	BalanceRoundRobin   = "round-robin"
)

// Defaults of Outlier, as Envoy's outlier detection.
const (
	DefaultMaxEjectionPercent = 10
	DefaultPanicThreshold     = 50
)

// SchemeH2C is the scheme of a target that speaks HTTP/2 without TLS,
// with prior knowledge (RFC 9113 §3.3): requests go to it as http ones
// would, over HTTP/2.
const SchemeH2C = "h2c"

// MaxWeight is the largest weight of a target.
const MaxWeight = 1000

// MaxTargets is the most targets an upstream may have.
const MaxTargets = 1000

// Defaults of HealthCheck.
const (
	DefaultHealthInterval  = 10 * time.Second
	DefaultHealthTimeout   = 2 * time.Second
	DefaultHealthyCount    = 2
	DefaultUnhealthyCount  = 3
	maxHealthCount         = 100
	minHealthCheckInterval = 100 * time.Millisecond
)

var (
	upstreamFields = []string{"name", "targets", "tls", "balancing", "healthCheck", "outlier"}
	outlierFields  = []string{"failures", "ejection", "maxEjection", "maxEjectionPercent", "panicThreshold", "statuses"}
	targetFields   = []string{"url", "weight"}
	tlsFields      = []string{"ca", "cert", "key", "serverName"}
	healthFields   = []string{"path", "interval", "timeout", "healthy", "unhealthy"}
	routeFields    = []string{"name", "host", "path", "upstream", "stripPrefix", "timeout", "errorFormat", "retryAfterMax"}
)

// upstreams reads the upstreams list.
func (p *parser) upstreams(f field) []Upstream {
	if f.val.Kind != yaml.SequenceNode {
		p.wrongType(f, p.word("a list", "an array")+" of upstreams (name and targets)")
		return nil
	}
	var out []Upstream
	names := map[string]int{}
	for _, item := range f.val.Content {
		n := deref(item)
		if n.Kind != yaml.MappingNode {
			p.errorf(item.Line, "each entry of upstreams must be %s with a name and targets, not %s", p.word("a mapping", "an object"), p.describe(n))
			continue
		}
		if u, ok := p.upstream(n, names); ok {
			out = append(out, u)
		}
	}
	return out
}

// upstream reads one upstream; names maps the names seen so far to their
// lines.
func (p *parser) upstream(n *yaml.Node, names map[string]int) (Upstream, bool) {
	u := Upstream{Line: n.Line, Balancing: BalanceLeastRequest}
	fs := p.fields(n, "this upstream", upstreamFields)
	ok := true
	if f, set := fs["name"]; !set {
		p.errorf(u.Line, "this upstream has no name; set name, which routes refer to")
		ok = false
	} else if name, good := p.str(f); !good {
		ok = false
	} else if !validName(name) {
		p.errorf(f.line, "upstream name %q is not valid; use 1 to 64 of the characters A-Z a-z 0-9 . _ -", name)
		ok = false
	} else if first, dup := names[name]; dup {
		p.upstreamNames[name] = true
		p.errorf(f.line, "upstream %q is already defined at line %d; give each upstream its own name", name, first)
		ok = false
	} else {
		names[name] = f.line
		p.upstreamNames[name] = true
		u.Name = name
	}
	if f, set := fs["balancing"]; set {
		if b, good := p.str(f); !good {
			ok = false
		} else if b != BalanceLeastRequest && b != BalanceRoundRobin {
			p.errorf(f.line, "balancing %q is not known; use %s (the default) or %s", b, BalanceLeastRequest, BalanceRoundRobin)
			ok = false
		} else {
			u.Balancing = b
		}
	}
	f, set := fs["targets"]
	if !set {
		p.errorf(u.Line, "this upstream has no targets; list the URLs of its servers, like targets: [http://10.0.0.1:8080]")
		return u, false
	}
	if !p.targets(f, &u) {
		ok = false
	}
	if f, set := fs["tls"]; set {
		t, good := p.upstreamTLS(f, &u)
		u.TLS, ok = t, ok && good
	}
	if f, set := fs["healthCheck"]; set {
		h, good := p.healthCheck(f)
		u.HealthCheck, ok = h, ok && good
	}
	if f, set := fs["outlier"]; set {
		o, good := p.outlier(f)
		u.Outlier, ok = o, ok && good
	}
	return u, ok
}

// outlier reads an upstream's outlier section.
func (p *parser) outlier(f field) (*Outlier, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.wrongType(f, p.word("a mapping", "an object")+" of failures, ejection and maxEjection")
		return nil, false
	}
	o := &Outlier{Failures: 5, Ejection: 10 * time.Second, MaxEjection: 5 * time.Minute,
		MaxEjectionPercent: DefaultMaxEjectionPercent, PanicThreshold: DefaultPanicThreshold, Line: f.line}
	fs := p.fields(f.val, "outlier", outlierFields)
	ok := true
	if g, set := fs["failures"]; set {
		v, good := p.integer(g)
		switch {
		case !good:
			ok = false
		case v < 1 || v > 1000:
			p.errorf(g.line, "outlier failures %d is outside 1..1000; it is how many failed requests in a row eject a target", v)
			ok = false
		default:
			o.Failures = int(v)
		}
	}
	for _, b := range []struct {
		name string
		lo   int64
		to   *int
		what string
	}{
		{"maxEjectionPercent", 1, &o.MaxEjectionPercent, "the most of the upstream's targets, in percent, that ejection holds out at once"},
		{"panicThreshold", 0, &o.PanicThreshold, "the percentage of targets in the pool below which ejected targets take requests again (0: never)"},
	} {
		g, set := fs[b.name]
		if !set {
			continue
		}
		v, good := p.integer(g)
		switch {
		case !good:
			ok = false
		case v < b.lo || v > 100:
			p.errorf(g.line, "outlier %s %d is outside %d..100; it is %s", b.name, v, b.lo, b.what)
			ok = false
		default:
			*b.to = int(v)
		}
	}
	if g, set := fs["statuses"]; set {
		st, good := p.outlierStatuses(g)
		o.Statuses, ok = st, ok && good
	}
	line := f.line
	for _, name := range []string{"ejection", "maxEjection"} {
		g, set := fs[name]
		if !set {
			continue
		}
		d, good := p.duration(g)
		switch {
		case !good:
			ok = false
		case name == "ejection":
			o.Ejection = d
		default:
			o.MaxEjection, line = d, g.line
		}
	}
	if ok && o.MaxEjection < o.Ejection {
		p.errorf(line, "outlier maxEjection %s is shorter than ejection %s", o.MaxEjection, o.Ejection)
		ok = false
	}
	return o, ok
}

// outlierStatuses reads an outlier's statuses: 5xx statuses, classes or
// ranges, as count's status takes them.
func (p *parser) outlierStatuses(f field) ([]StatusRange, bool) {
	items, isList := oneOrList(f)
	if !isList {
		p.errorf(f.line, "outlier statuses must be a status, a class like \"5xx\", a range like \"502-504\", or a list of them, not %s", p.describe(f.val))
		return nil, false
	}
	var out []StatusRange
	ok := true
	for _, it := range items {
		r, err := parseStatus(it.node)
		switch {
		case err != "":
			p.errorf(it.line, "outlier status %s %s", p.describe(it.node), err)
			ok = false
		case r.Lo < 500:
			p.errorf(it.line, "outlier status %s is not a 5xx status; a target is failing only when it answers 5xx (a 4xx answers the caller's request)", r)
			ok = false
		default:
			out = append(out, r)
		}
	}
	return out, ok
}

// validName reports whether s is a valid upstream or route name.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// targets reads an upstream's targets: URLs, or mappings of url and
// weight.
func (p *parser) targets(f field, u *Upstream) bool {
	items, isList := oneOrList(f)
	if !isList || f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null" {
		p.wrongType(f, p.word("a list", "an array")+" of target URLs")
		return false
	}
	if len(items) == 0 {
		p.errorf(f.line, "targets is empty; list the URLs of the upstream's servers")
		return false
	}
	if len(items) > MaxTargets {
		p.errorf(f.line, "an upstream has at most %d targets, not %d", MaxTargets, len(items))
		return false
	}
	ok := true
	seen := map[string]int{}
	for _, it := range items {
		t := Target{Weight: 1, Line: it.line}
		urlNode, urlLine := it.node, it.line
		if it.node.Kind == yaml.MappingNode {
			fs := p.fields(it.node, "this target", targetFields)
			uf, has := fs["url"]
			if !has {
				p.errorf(it.line, "this target has no url; write the target's URL, like url: http://10.0.0.1:8080")
				ok = false
				continue
			}
			urlNode, urlLine = uf.val, uf.line
			if wf, has := fs["weight"]; has {
				w, good := p.integer(wf)
				switch {
				case !good:
					ok = false
				case w < 1 || w > MaxWeight:
					p.errorf(wf.line, "weight %d is outside 1..%d; it is the target's share of requests relative to the others'", w, MaxWeight)
					ok = false
				default:
					t.Weight = int(w)
				}
			}
		}
		if urlNode.Kind != yaml.ScalarNode || urlNode.ShortTag() != "!!str" {
			p.errorf(urlLine, "a target must be a URL like http://10.0.0.1:8080, or %s with url and weight, not %s", p.word("a mapping", "an object"), p.describe(urlNode))
			ok = false
			continue
		}
		tu, err := parseTargetURL(urlNode.Value)
		if err != nil {
			p.errorf(urlLine, "target %q: %s", urlNode.Value, err)
			ok = false
			continue
		}
		key := tu.Scheme + "://" + strings.ToLower(tu.Host)
		if first, dup := seen[key]; dup {
			p.errorf(urlLine, "target %s is listed twice (first at line %d); give it a weight instead", key, first)
			ok = false
			continue
		}
		seen[key] = urlLine
		if len(u.Targets) > 0 {
			if first := u.Targets[0].URL; first.Scheme != tu.Scheme || first.Path != tu.Path {
				p.errorf(urlLine, "target %s has another scheme or path than %s at line %d; the targets of one upstream share both (put others in another upstream)", urlNode.Value, first, u.Targets[0].Line)
				ok = false
				continue
			}
		}
		t.URL = tu
		u.Targets = append(u.Targets, t)
	}
	return ok
}

// parseTargetURL parses the URL of a target.
func parseTargetURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		return nil, fmt.Errorf("the URL has no scheme; write it like http://%s", s)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL (%v); write one like http://10.0.0.1:8080", err)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != SchemeH2C:
		return nil, errors.New("the scheme must be http, https or h2c (HTTP/2 without TLS, as gRPC servers speak it), like http://10.0.0.1:8080")
	case u.Host == "":
		return nil, errors.New("the URL has no host; write one like http://10.0.0.1:8080")
	case u.User != nil:
		return nil, errors.New("the URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, errors.New("the URL must not have a query or a fragment")
	}
	if host, port, err := net.SplitHostPort(u.Host); err == nil {
		if host == "" || port == "" {
			return nil, errors.New("the URL's host or port is empty")
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// healthCheck reads an upstream's healthCheck section.
func (p *parser) healthCheck(f field) (*HealthCheck, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.wrongType(f, p.word("a mapping", "an object")+" of path, interval, timeout, healthy and unhealthy")
		return nil, false
	}
	h := &HealthCheck{Path: "/", Interval: DefaultHealthInterval, Timeout: DefaultHealthTimeout,
		Healthy: DefaultHealthyCount, Unhealthy: DefaultUnhealthyCount, Line: f.line}
	fs := p.fields(f.val, "healthCheck", healthFields)
	ok := true
	if g, set := fs["path"]; set {
		s, good := p.str(g)
		switch {
		case !good:
			ok = false
		case !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " #\r\n"):
			p.errorf(g.line, "healthCheck path %q must start with / and hold no spaces or #", s)
			ok = false
		default:
			h.Path = s
		}
	}
	timeoutLine := f.line
	for _, name := range []string{"interval", "timeout"} {
		g, set := fs[name]
		if !set {
			continue
		}
		d, good := p.duration(g)
		switch {
		case !good:
			ok = false
		case d < minHealthCheckInterval:
			p.errorf(g.line, "healthCheck %s %s is below %s", name, d, minHealthCheckInterval)
			ok = false
		case name == "interval":
			h.Interval = d
		default:
			h.Timeout, timeoutLine = d, g.line
		}
	}
	if ok && h.Timeout > h.Interval {
		p.errorf(timeoutLine, "healthCheck timeout %s is longer than its interval %s; make it shorter", h.Timeout, h.Interval)
		ok = false
	}
	for _, name := range []string{"healthy", "unhealthy"} {
		g, set := fs[name]
		if !set {
			continue
		}
		v, good := p.integer(g)
		switch {
		case !good:
			ok = false
		case v < 1 || v > maxHealthCount:
			p.errorf(g.line, "healthCheck %s %d is outside 1..%d; it is how many probes in a row change a target's state", name, v, maxHealthCount)
			ok = false
		case name == "healthy":
			h.Healthy = int(v)
		default:
			h.Unhealthy = int(v)
		}
	}
	return h, ok
}

// duration reads a positive Go duration string ("30s").
func (p *parser) duration(f field) (time.Duration, bool) {
	n := f.val
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		if _, _, kind := number(n); kind != notNumber {
			p.errorf(f.line, "%s %s has no time unit; write a duration like %q", f.name, n.Value, n.Value+"s")
			return 0, false
		}
		p.wrongType(f, `a duration like "30s"`)
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	switch {
	case err != nil:
		p.errorf(f.line, "%s %q is not a duration; write one like \"30s\" or \"500ms\"", f.name, n.Value)
		return 0, false
	case d <= 0:
		p.errorf(f.line, "%s %q is not positive", f.name, n.Value)
		return 0, false
	}
	return d, true
}
