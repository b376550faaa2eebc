package ruleset

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/trie"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// ErrNoUpstream is wrapped by the error of compiling rules without routes
// when there is no --upstream: no request could go anywhere.
var ErrNoUpstream = errors.New("no upstream")

// RouteOptions are what compiling routes needs beyond the rule file: the
// registry that keeps the upstreams' pools across reloads, and what
// builds the reverse proxy each route forwards through.
type RouteOptions struct {
	// Registry builds the pools. Nil compiles the routes without pools,
	// for match and validate: they then only name their route.
	Registry *upstream.Registry
	// Forwarder builds the handler that forwards a route's requests to
	// its pool (Route.Pool, with Route.Timeout and Route.Strip), once per
	// compiled route; package proxy provides it (proxy.RouteForwarder).
	// Nil leaves Route.Handler nil.
	Forwarder func(*Route) (http.Handler, error)
	// NoDefault reports that there is no --upstream: a rule file must
	// then have routes, and a request no route matches gets 404.
	NoDefault bool
}

// Route is one compiled route of the rule file (docs/routes.md). Like the
// Set that holds it, it must not be modified.
type Route struct {
	// Name, Upstream, Host, Pattern and Line are the route's entry of the
	// rule file.
	Name, Upstream string
	Host, Pattern  string
	Line           int
	// Strip is the number of leading segments removed from the
	// forwarded path, 0 when the route keeps the path.
	Strip   int
	Timeout time.Duration
	// Refusal is how refusals of the route's requests are written where
	// their limit does not say.
	Refusal config.Refusal
	Pool    *upstream.Pool
	// Handler forwards to the pool; nil without a Registry or a
	// Forwarder.
	Handler http.Handler
}

// routeTable finds the route of a request: by host, exact before the
// longest wildcard suffix before the routes for every host, then by the
// most specific path, as the limits match.
type routeTable struct {
	exact map[string]*trie.Trie[*Route]
	// wild are the *.suffix routes' tries, longest suffix first; each
	// suffix starts with ".".
	wild    []wildRoutes
	any     *trie.Trie[*Route]
	routes  []*Route
	set     *upstream.Set
	noRoute bool // no --upstream: a request no route matches is 404
}

type wildRoutes struct {
	suffix string
	t      *trie.Trie[*Route]
}

// compileRoutes builds the route table of rules; nil when the file has no
// routes.
func compileRoutes(rules *config.Rules, opts *CompileOptions) (*routeTable, error) {
	ro := opts.Routes
	if len(rules.Routes) == 0 {
		if ro != nil && ro.NoDefault {
			return nil, fmt.Errorf("%w: pass --upstream URL (or --demo-upstream to try the gateway), or add routes and upstreams to the rule file %s", ErrNoUpstream, rules.Path)
		}
		if ro != nil && ro.Registry != nil && len(rules.Upstreams) > 0 {
			// Upstreams without routes: built, so that /upstreams shows
			// them and their health checks run.
			set, err := ro.Registry.Build(rules.Upstreams)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rules.Path, err)
			}
			return &routeTable{set: set}, nil
		}
		return nil, nil
	}
	rt := &routeTable{exact: map[string]*trie.Trie[*Route]{}}
	rt.noRoute = ro != nil && ro.NoDefault
	if ro != nil && ro.Registry != nil {
		var err error
		if rt.set, err = ro.Registry.Build(rules.Upstreams); err != nil {
			return nil, fmt.Errorf("%s: %w", rules.Path, err)
		}
	}
	topts := trie.Options{CaseInsensitive: rules.CaseInsensitive}
	wild := map[string]*trie.Trie[*Route]{}
	for i := range rules.Routes {
		cr := &rules.Routes[i]
		_, segs, err := trie.ParsePattern(cr.Path)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", rules.Path, cr.Line, err)
		}
		r := &Route{Name: cr.Name, Upstream: cr.Upstream, Host: cr.Host, Pattern: cr.Path, Line: cr.Line, Timeout: cr.Timeout, Refusal: cr.Refusal}
		if cr.StripPrefix {
			r.Strip = len(segs)
		}
		if rt.set != nil {
			if r.Pool = rt.set.Pool(cr.Upstream); r.Pool == nil {
				return nil, fmt.Errorf("%s:%d: route names upstream %q, which is not defined", rules.Path, cr.Line, cr.Upstream)
			}
			if ro.Forwarder != nil {
				if r.Handler, err = ro.Forwarder(r); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", rules.Path, cr.Line, err)
				}
			}
		}
		var t *trie.Trie[*Route]
		switch {
		case cr.Host == "":
			if rt.any == nil {
				rt.any = trie.New[*Route](topts)
			}
			t = rt.any
		case strings.HasPrefix(cr.Host, "*."):
			suffix := cr.Host[1:]
			if t = wild[suffix]; t == nil {
				t = trie.New[*Route](topts)
				wild[suffix] = t
				rt.wild = append(rt.wild, wildRoutes{suffix: suffix, t: t})
			}
		default:
			if t = rt.exact[cr.Host]; t == nil {
				t = trie.New[*Route](topts)
				rt.exact[cr.Host] = t
			}
		}
		if err := t.Insert(cr.Path, nil, r); err != nil {
			return nil, fmt.Errorf("%s:%d: route: %w", rules.Path, cr.Line, err)
		}
		rt.routes = append(rt.routes, r)
	}
	slices.SortFunc(rt.wild, func(a, b wildRoutes) int { return cmp.Compare(len(b.suffix), len(a.suffix)) })
	return rt, nil
}

// match returns the route of a request for host (the Host header, port
// and all) and its normalized path, nil if none matches.
func (rt *routeTable) match(host, path string) *Route {
	if rt == nil {
		return nil
	}
	if len(rt.exact) > 0 || len(rt.wild) > 0 {
		h := hostOnly(host)
		if t := rt.exact[h]; t != nil {
			if r, _, ok := t.Match("", path); ok {
				return r
			}
		}
		for _, w := range rt.wild {
			if len(h) > len(w.suffix) && strings.HasSuffix(h, w.suffix) {
				if r, _, ok := w.t.Match("", path); ok {
					return r
				}
			}
		}
	}
	if rt.any != nil {
		if r, _, ok := rt.any.Match("", path); ok {
			return r
		}
	}
	return nil
}

// Route returns the route of a request for host (the Host header, port
// and all) and its normalized path, nil if none matches or rs has no
// routes.
func (rs *Set) Route(host, path string) *Route { return rs.routes.match(host, path) }

// NoRoute reports whether a request that no route matches is refused
// with 404 no_route: rs was compiled with RouteOptions.NoDefault.
func (rs *Set) NoRoute() bool { return rs.routes != nil && rs.routes.noRoute }

// hostOnly returns the host of a Host header, lower case, without the
// port or a trailing dot. It allocates only for a host with upper case.
func hostOnly(host string) string {
	// Without a colon SplitHostPort fails, and allocates its error: the
	// common Host header of a client on the default port has none.
	if strings.IndexByte(host, ':') >= 0 {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	host = strings.TrimSuffix(host, ".")
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(host)
		}
	}
	return host
}

// Upstreams returns the pools of rs's upstreams, nil when it has none or
// was compiled without a registry.
func (rs *Set) Upstreams() *upstream.Set {
	if rs.routes == nil {
		return nil
	}
	return rs.routes.set
}

// RouteView describes a route for /rules.
type RouteView struct {
	Name        string `json:"name"`
	Host        string `json:"host,omitempty"`
	Path        string `json:"path"`
	Upstream    string `json:"upstream"`
	StripPrefix bool   `json:"stripPrefix,omitempty"`
	Timeout     string `json:"timeout,omitempty"`
	Line        int    `json:"line"`
}

// Routes describes rs's routes in file order.
func (rs *Set) Routes() []RouteView {
	if rs.routes == nil {
		return nil
	}
	var out []RouteView
	for _, r := range rs.routes.routes {
		v := RouteView{Name: r.Name, Host: r.Host, Path: r.Pattern, Upstream: r.Upstream, StripPrefix: r.Strip > 0, Line: r.Line}
		if r.Timeout > 0 {
			v.Timeout = r.Timeout.String()
		}
		out = append(out, v)
	}
	return out
}

// explainRoute says, as a line of Explain, where a request for host and
// the normalized path goes.
func (rs *Set) explainRoute(host, clean string) string {
	rt := rs.routes
	if rt == nil || len(rt.routes) == 0 {
		return ""
	}
	r := rt.match(host, clean)
	switch {
	case r != nil:
		s := fmt.Sprintf("route %s (line %d): host %s, path %s → upstream %s", r.Name, r.Line, cmp.Or(r.Host, "any"), r.Pattern, r.Upstream)
		if r.Strip > 0 {
			s += ", prefix stripped"
		}
		return s + "\n"
	case rt.noRoute:
		return "no route matches: refused with 404 no_route\n"
	}
	return "no route matches: forwarded to --upstream\n"
}
