package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/stores"
	"github.com/ratelimit-gateway/gateway/internal/upstream"
)

// readyView is the JSON of GET /readyz with a store report.
type readyView struct {
	Status  string         `json:"status"`
	Error   string         `json:"error,omitempty"`
	Message string         `json:"message,omitempty"`
	Store   *stores.Health `json:"store,omitempty"`
	// Rules is the state of a rule store (etcd): shown, but a lost
	// store does not make the gateway unready, as it keeps its rules.
	Rules *source.Status `json:"rules,omitempty"`
}

// rulesView is the JSON of GET /rules.
type rulesView struct {
	Path          string     `json:"path"`
	SHA256        string     `json:"sha256"`
	LoadedAt      time.Time  `json:"loadedAt"`
	CaseSensitive bool       `json:"caseSensitive"`
	Apps          []appView  `json:"apps"`
	LastError     string     `json:"lastError,omitempty"`
	LastErrorAt   *time.Time `json:"lastErrorAt,omitempty"`
	// Source is the rule store's state and the version in force, for
	// rules from a store.
	Source *source.Status `json:"source,omitempty"`
	// Routes are the rule file's routes; their upstreams' state is at
	// /upstreams.
	Routes []ruleset.RouteView `json:"routes,omitempty"`
}

type appView struct {
	AppID string    `json:"appId"`
	By    config.By `json:"by"`
	// Missing is what a request lacking a header or query value of By
	// gets; shown only when By names one.
	Missing config.Missing `json:"missing,omitempty"`
	// Keys is how many API keys the app has; the digests are not shown.
	Keys  int        `json:"keys,omitempty"`
	Total *limitView `json:"total,omitempty"`
	// Concurrency is the most requests of the app in flight at once
	// (per counter of By); 0, and not shown, for none.
	Concurrency int64 `json:"concurrency,omitempty"`
	// Plan is the plan the app takes; its rules are among Limits.
	Plan   string      `json:"plan,omitempty"`
	Limits []limitView `json:"limits"`
}

type limitView struct {
	API       string   `json:"api,omitempty"`
	Methods   []string `json:"methods,omitempty"`
	Limit     int64    `json:"limit"`
	Unit      string   `json:"unit"`
	Timezone  string   `json:"timezone,omitempty"`
	Algorithm string   `json:"algorithm"`
	Precision int      `json:"precision,omitempty"`
	Burst     int64    `json:"burst,omitempty"`
	Warmup    string   `json:"warmup,omitempty"`
	Lock      string   `json:"lock,omitempty"`
	Shadow    bool     `json:"shadow,omitempty"`
	// Concurrency is the most requests in flight at once; a rule with
	// only concurrency has limit -1.
	Concurrency int64 `json:"concurrency,omitempty"`
	// Cost and Count are the limit's cost and counted statuses (the
	// docs/rules.md, "Request cost"): "100", "header X-RateLimit-Cost (min 1,
	// max 8000)"; "401,403,5xx". Empty for one unit per request.
	Cost  string `json:"cost,omitempty"`
	Count string `json:"count,omitempty"`
	// By and Missing are the rule's own, or its app's; Missing only
	// when By names a header or query parameter.
	By      config.By      `json:"by,omitempty"`
	Missing config.Missing `json:"missing,omitempty"`
	Line    int            `json:"line,omitempty"`
	// Plan is the plan the rule comes from; empty for the app's own.
	Plan string `json:"plan,omitempty"`
}

func newLimitView(p *limit.Params) limitView {
	v := limitView{Limit: p.Limit, Unit: p.Unit(), Timezone: p.Zone, Algorithm: p.Algorithm, Precision: p.Precision, Burst: p.Burst}
	if p.Warmup > 0 {
		v.Warmup = p.Warmup.String()
	}
	if p.Lock > 0 {
		v.Lock = p.Lock.String()
	}
	return v
}

// costView returns c as /rules shows it: "" for the default of one unit.
func costView(c config.Cost) string {
	if c.Header == "" && c.Units <= 1 {
		return ""
	}
	return c.String()
}

// missingOf returns what a request lacking a value of by gets: m, or the
// default; "" when by names no header or query parameter.
func missingOf(by config.By, m config.Missing) config.Missing {
	if !by.Attributes() {
		return ""
	}
	return cmp.Or(m, config.MissingIP)
}

func (r *Reloader) view() rulesView {
	rs := r.Rules()
	src := rs.Source
	v := rulesView{
		Path:          src.Path,
		SHA256:        src.SHA256,
		LoadedAt:      rs.LoadedAt.UTC(),
		CaseSensitive: !src.CaseInsensitive, // the rule file's setting, by its name
		Apps:          make([]appView, 0, len(src.Apps)),
		Routes:        rs.Routes(),
	}
	for _, a := range src.Apps {
		av := appView{AppID: a.ID, By: a.By, Missing: missingOf(a.By, a.Missing), Keys: len(a.Keys), Concurrency: a.Concurrency, Plan: a.Plan, Limits: make([]limitView, 0, len(a.Limits))}
		if a.Total != nil {
			lv := newLimitView(a.Total)
			lv.Line = a.Line
			lv.Cost, lv.Count = costView(a.TotalCost), a.TotalCount.String()
			av.Total = &lv
		}
		for _, l := range a.Limits {
			lv := newLimitView(&l.Params)
			lv.API, lv.Methods, lv.Shadow, lv.Line, lv.Concurrency = l.API, l.Methods, l.Shadow, l.Line, l.Concurrency
			lv.Cost, lv.Count, lv.Plan = costView(l.Cost), l.Count.String(), l.Plan
			lv.By = cmp.Or(l.By, a.By)
			lv.Missing = missingOf(lv.By, cmp.Or(l.Missing, a.Missing))
			av.Limits = append(av.Limits, lv)
		}
		v.Apps = append(v.Apps, av)
	}
	if msg, at := r.lastErr(); msg != "" {
		at = at.UTC()
		v.LastError, v.LastErrorAt = msg, &at
	}
	if r.source != nil {
		st := r.source.Status()
		v.Source = &st
	}
	return v
}

// AdminConfig configures the admin handler.
type AdminConfig struct {
	// Rules is the reload state shown at /rules. Required.
	Rules *Reloader
	// Draining, if not nil, reports whether the gateway is draining on
	// its way out: /readyz is then 503 draining.
	Draining func() bool
	// Store, if not nil, reports on the store for /readyz, which is not
	// ready while the store's Serving is false (docs/operations.md, "Admin port").
	Store func(ctx context.Context) stores.Health
	// Metrics, if not nil, is served at /metrics.
	Metrics http.Handler
	// Top, if not nil, is served at /top.
	Top *observe.Top
	// Pprof serves the Go profiler at /debug/pprof/.
	Pprof bool
	// Upstreams, if not nil, are the rule file's pools, shown at
	// /upstreams; ReadyUpstreams are those /readyz depends on.
	Upstreams      *upstream.Registry
	ReadyUpstreams []string
	// Token is the bearer token that the mutating endpoints (POST
	// /rules/reload, POST /usage/reset) require. Empty disables them: the
	// admin port is plain HTTP, and an endpoint that changes the gateway
	// must not be open to whoever can reach it. When set, the reads that
	// reveal callers or keys (GET /rules, /top, /usage) require it too.
	Token string
	// Usage, if not nil, serves GET /usage and POST /usage/reset (with
	// the Token; usage.go).
	Usage *UsageConfig
}

// NewAdmin returns the admin port's handler: /healthz (the process is
// alive), /readyz (rules loaded and the store usable), /rules (the rules in
// force and the last reload error), POST /rules/reload (with the Token),
// /metrics and /top.
func NewAdmin(cfg AdminConfig) http.Handler {
	mux := http.NewServeMux()
	auth := newAdminAuth(cfg.Token)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		proxy.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Draining != nil && cfg.Draining() {
			proxy.WriteJSON(w, http.StatusServiceUnavailable, readyView{
				Status: "draining", Error: "draining",
				Message: "the gateway is shutting down: it finishes the requests in flight and accepts no more",
			})
			return
		}
		var rules *source.Status
		if cfg.Rules.source != nil {
			st := cfg.Rules.source.Status()
			rules = &st
		}
		if len(cfg.ReadyUpstreams) > 0 && cfg.Upstreams != nil {
			if down := notReadyUpstreams(cfg.Upstreams.Current(), cfg.ReadyUpstreams, time.Now()); len(down) > 0 {
				proxy.WriteJSON(w, http.StatusServiceUnavailable, readyView{
					Status: "not_ready", Error: "no_healthy_upstream",
					Message: "no target of upstream " + strings.Join(down, ", ") + " is healthy (--ready-upstream)",
					Rules:   rules,
				})
				return
			}
		}
		if cfg.Store == nil {
			proxy.WriteJSON(w, http.StatusOK, readyView{Status: "ready", Rules: rules})
			return
		}
		h := cfg.Store(r.Context())
		if !h.Serving {
			proxy.WriteJSON(w, http.StatusServiceUnavailable, readyView{
				Status: "not_ready", Error: "not_ready",
				Message: "the store is unreachable and --fail-mode closed refuses requests without it",
				Store:   &h, Rules: rules,
			})
			return
		}
		proxy.WriteJSON(w, http.StatusOK, readyView{Status: "ready", Store: &h, Rules: rules})
	})
	if cfg.Upstreams != nil {
		mux.HandleFunc("GET /upstreams", upstreamsHandler(cfg.Upstreams))
	}
	mux.Handle("GET /rules", auth.reads(func(w http.ResponseWriter, _ *http.Request) {
		proxy.WriteJSON(w, http.StatusOK, cfg.Rules.view())
	}))
	mux.Handle("POST /rules/reload", auth.require(func(w http.ResponseWriter, _ *http.Request) {
		changed, err := cfg.Rules.Reload()
		if err != nil {
			proxy.WriteError(w, http.StatusUnprocessableEntity, "reload_failed", err.Error())
			return
		}
		status := "unchanged"
		if changed {
			status = "reloaded"
		}
		proxy.WriteJSON(w, http.StatusOK, map[string]string{"status": status, "sha256": cfg.Rules.Rules().Source.SHA256})
	}))
	if cfg.Usage != nil {
		registerUsage(mux, cfg.Rules, cfg.Usage, auth)
	}
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.Top != nil {
		mux.Handle("GET /top", auth.reads(topHandler(cfg.Top, time.Now)))
	}
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// adminAuth checks the bearer token of the mutating admin endpoints. The
// zero value has no token and refuses every request.
type adminAuth struct {
	// digest is the SHA-256 of the token; nil when there is none.
	// Comparing digests rather than tokens takes the same time whatever
	// the lengths, so that timing tells an attacker nothing about the
	// token, not even its length.
	digest []byte
}

func newAdminAuth(token string) adminAuth {
	if token == "" {
		return adminAuth{}
	}
	d := sha256.Sum256([]byte(token))
	return adminAuth{digest: d[:]}
}

// require wraps h so that it runs only for a request that carries the
// token as "Authorization: Bearer <token>" (RFC 6750 §2.1).
func (a adminAuth) require(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.digest == nil {
			proxy.WriteError(w, http.StatusForbidden, "admin_disabled",
				r.Method+" "+r.URL.Path+" is disabled: start the gateway with --admin-token (or GATEWAY_ADMIN_TOKEN, or --admin-token-file) and send it as Authorization: Bearer <token>")
			return
		}
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			// RFC 6750 §3: no credentials, no error code.
			w.Header().Set("WWW-Authenticate", `Bearer realm="gateway admin"`)
			proxy.WriteError(w, http.StatusUnauthorized, "unauthorized",
				r.Method+" "+r.URL.Path+" needs the --admin-token as Authorization: Bearer <token>")
			return
		}
		d := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(d[:], a.digest) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gateway admin", error="invalid_token"`)
			proxy.WriteError(w, http.StatusUnauthorized, "unauthorized",
				"the bearer token is not the --admin-token")
			return
		}
		h(w, r)
	})
}

// reads wraps h, an endpoint that reads what reveals callers or keys
// (/rules, /top, /usage), so that it needs the token when the gateway has
// one; without a token it is open, and the admin port is on loopback by
// default (docs/operations.md, "Admin port"). Health probes and /metrics
// stay open either way: kubelets and Prometheus carry no token.
func (a adminAuth) reads(h http.HandlerFunc) http.Handler {
	if a.digest == nil {
		return h
	}
	return a.require(h)
}

// bearerToken returns the token of an Authorization header value of the
// Bearer scheme, whose name is case-insensitive (RFC 9110 §11.1).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
