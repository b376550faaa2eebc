package config

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/trie"
)

// Route sends the requests for a host and a path to an upstream.
type Route struct {
	// Name names the route in the access log, the metrics and /top:
	// the route's name field, else its host and path
	// ("api.example.com/v1").
	Name string
	// Host is the request host the route applies to, lower case:
	// "" for every host, "api.example.com" exactly, or "*.example.com"
	// for every host below example.com.
	Host string
	// Path is the canonical path pattern (see trie.ParsePattern): the
	// route applies to the paths below it, segment by segment, after the
	// normalisation the limits match on.
	Path string
	// Upstream is the name of the upstream the requests go to.
	Upstream string
	// StripPrefix removes the segments Path matched from the forwarded
	// path.
	StripPrefix bool
	// Timeout bounds the wait for the upstream's response headers; 0
	// means the gateway's --upstream-timeout.
	Timeout time.Duration
	// Refusal is how the refusals of requests taking the route are
	// written where their limit does not say (refusal.go).
	Refusal Refusal
	// Line is where the route starts in the file.
	Line int
}

// routes reads the routes list; upstreams are the upstreams of the file,
// which routes must name.
func (p *parser) routes(f field, upstreams []Upstream) []Route {
	if f.val.Kind != yaml.SequenceNode {
		p.wrongType(f, p.word("a list", "an array")+" of routes (path and upstream)")
		return nil
	}
	known := map[string]bool{}
	for _, u := range upstreams {
		known[u.Name] = true
	}
	names := slices.Sorted(maps.Keys(p.upstreamNames))
	// The routes so far by host, as tries of their lines: a route that
	// matches the same paths as one before it is a duplicate.
	seen := map[string]*trie.Trie[int]{}
	routeNames := map[string]int{}
	var out []Route
	for _, item := range f.val.Content {
		n := deref(item)
		if n.Kind != yaml.MappingNode {
			p.errorf(item.Line, "each entry of routes must be %s with a path and an upstream, not %s", p.word("a mapping", "an object"), p.describe(n))
			continue
		}
		r, ok := p.route(n)
		if r.Upstream != "" && !known[r.Upstream] && !p.upstreamNames[r.Upstream] {
			if len(p.upstreamNames) == 0 {
				p.errorf(r.Line, "route names upstream %q, but the file defines no upstreams; add it under upstreams", r.Upstream)
			} else {
				p.errorf(r.Line, "route names upstream %q, which is not defined; the upstreams are %s", r.Upstream, strings.Join(names, ", "))
			}
			ok = false
		}
		if !ok {
			continue
		}
		t := seen[r.Host]
		if t == nil {
			t = trie.New[int](trie.Options{CaseInsensitive: p.caseInsensitive})
			seen[r.Host] = t
		}
		var dup *trie.DuplicateError[int]
		if errors.As(t.Insert(r.Path, nil, r.Line), &dup) {
			on := ""
			if r.Host != "" {
				on = " on host " + r.Host
			}
			p.errorf(r.Line, "a route for %s%s is already defined at line %d; remove one of them", r.Path, on, dup.Value)
			continue
		}
		if first, dup := routeNames[r.Name]; dup {
			p.errorf(r.Line, "route name %q is already used at line %d; give each route its own name", r.Name, first)
			continue
		}
		routeNames[r.Name] = r.Line
		out = append(out, r)
	}
	return out
}

// route reads one route.
func (p *parser) route(n *yaml.Node) (Route, bool) {
	r := Route{Line: n.Line, Path: "/"}
	fs := p.fields(n, "this route", routeFields)
	ok := true
	if f, set := fs["host"]; set {
		h, good := p.str(f)
		if good {
			var err error
			if h, err = parseRouteHost(h); err != nil {
				p.errorf(f.line, "route host %q: %s", f.val.Value, err)
				good = false
			}
		}
		r.Host, ok = h, good
	}
	if f, set := fs["path"]; set {
		s, good := p.str(f)
		if good {
			c, _, err := trie.ParsePattern(s)
			if err != nil {
				p.errorf(f.line, "route path: %s", strings.Replace(err.Error(), "api pattern", "path", 1))
				good = false
			}
			r.Path = c
		}
		ok = ok && good
	}
	if f, set := fs["upstream"]; !set {
		p.errorf(r.Line, "this route has no upstream; set upstream to the name of one of the upstreams")
		ok = false
	} else if s, good := p.str(f); good {
		r.Upstream = s
	} else {
		ok = false
	}
	if f, set := fs["stripPrefix"]; set {
		b, good := p.boolean(f)
		r.StripPrefix, ok = b, ok && good
	}
	if f, set := fs["timeout"]; set {
		d, good := p.duration(f)
		r.Timeout, ok = d, ok && good
	}
	if rf, good := p.refusal(fs); good {
		r.Refusal = rf
	} else {
		ok = false
	}
	r.Name = r.Host + r.Path
	if f, set := fs["name"]; set {
		s, good := p.str(f)
		switch {
		case !good:
			ok = false
		case !validName(s):
			p.errorf(f.line, "route name %q is not valid; use 1 to 64 of the characters A-Z a-z 0-9 . _ -", s)
			ok = false
		default:
			r.Name = s
		}
	}
	return r, ok
}

// parseRouteHost checks a route's host and returns it in lower case.
func parseRouteHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSpace(h))
	name := strings.TrimPrefix(h, "*.")
	switch {
	case h == "":
		return "", errors.New("the host is empty; remove host for a route of every host")
	case strings.Contains(name, "*"):
		return "", errors.New("a wildcard is only allowed as the first label, like *.example.com")
	case strings.Contains(h, ":"):
		return "", errors.New("write the host without a port: a route applies to every port")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return "", errors.New("the host is not a valid DNS name")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", errors.New("the host is not a valid DNS name")
			}
		}
	}
	return h, nil
}
