package server

import (
	"net/http"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// upstreamsView is the JSON of GET /upstreams.
type upstreamsView struct {
	Upstreams []poolView `json:"upstreams"`
}

type poolView struct {
	Name string `json:"name"`
	// Ready reports whether a target takes requests.
	Ready bool `json:"ready"`
	// Panic reports whether so few targets are in the pool that the
	// ejected ones take requests too (docs/routes.md, "Health").
	Panic   bool                   `json:"panic,omitempty"`
	Targets []upstream.TargetState `json:"targets"`
}

// upstreamsOf describes the pools of set at now.
func upstreamsOf(set *upstream.Set, now time.Time) upstreamsView {
	v := upstreamsView{Upstreams: []poolView{}}
	for _, p := range set.Pools() {
		pv := poolView{Name: p.Name(), Ready: p.Ready(now), Panic: p.Panicking(now), Targets: p.States(now)}
		v.Upstreams = append(v.Upstreams, pv)
	}
	return v
}

// notReadyUpstreams returns those of names that set has no target in at
// now, or does not define.
func notReadyUpstreams(set *upstream.Set, names []string, now time.Time) []string {
	var out []string
	for _, n := range names {
		if p := set.Pool(n); p == nil || !p.Ready(now) {
			out = append(out, n)
		}
	}
	return out
}

// commitUpstreams puts the pools of rs in force in reg.
func commitUpstreams(reg *upstream.Registry, rs *ruleset.Set) {
	set := rs.Upstreams()
	if set == nil {
		set, _ = reg.Build(nil) // none: every pool is dropped
	}
	reg.Commit(set)
}

// noRoute is the handler of requests no route matches when there is no
// --upstream; the proxy refuses them before it gets here.
var noRoute = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	proxy.WriteError(w, http.StatusNotFound, "no_route", "no route of the gateway matches this host and path")
})

// upstreamsHandler serves GET /upstreams.
func upstreamsHandler(reg *upstream.Registry) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		proxy.WriteJSON(w, http.StatusOK, upstreamsOf(reg.Current(), time.Now()))
	}
}
