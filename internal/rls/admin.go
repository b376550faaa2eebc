package rls

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// adminHandler serves /healthz, /readyz, /metrics, /rules and /top.
func (s *Server) adminHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		h := s.stores.Health(ctx)
		v := map[string]any{"status": "ready", "store": h}
		code := http.StatusOK
		switch {
		case s.draining.Load():
			v["status"], code = "draining", http.StatusServiceUnavailable
		case !h.Serving:
			v["status"], code = "unavailable", http.StatusServiceUnavailable
		}
		writeJSON(w, code, v)
	})
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /rules", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.rulesView())
	})
	mux.Handle("GET /top", topHandler(s.top, time.Now))
	mux.HandleFunc("GET /healthcheck", s.healthcheck)
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, dump(s.state.Load().configInUse))
	})
	mux.HandleFunc("POST /json", s.jsonHandler)
	return mux
}

// topView is the JSON of GET /top, as `gateway serve` writes it so that
// `gateway top` reads both.
type topView struct {
	// At is when the listing was taken.
	At time.Time `json:"at"`
	// K is how many values each descriptor keeps.
	K      int                `json:"k"`
	Limits []observe.TopLimit `json:"limits"`
}

// topHandler serves GET /top[?domain=D]: per domain and descriptor, the
// heaviest values of the last minutes (docs/rls.md "Top talkers"); app=
// is taken for domain=, as `gateway top --app` sends it. The values are
// callers' (addresses, user IDs): the admin port must stay internal.
func topHandler(top *Top, now func() time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		at := now().UTC()
		q := r.URL.Query()
		domain := cmp.Or(q.Get("domain"), q.Get("app"))
		writeJSON(w, http.StatusOK, topView{At: at, K: top.K(), Limits: top.Snapshot(at, domain)})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// rulesView is the JSON of GET /rules: the configuration in force.
type rulesView struct {
	Path        string           `json:"path"`
	SHA256      string           `json:"sha256"`
	LoadedAt    time.Time        `json:"loadedAt"`
	Files       []rlsconfig.File `json:"files"`
	Domains     []domainView     `json:"domains"`
	LastError   string           `json:"lastError,omitempty"`
	LastErrorAt *time.Time       `json:"lastErrorAt,omitempty"`
}

type domainView struct {
	Domain      string           `json:"domain"`
	Descriptors []descriptorView `json:"descriptors"`
}

type descriptorView struct {
	Path           string   `json:"path"`
	Limit          string   `json:"limit,omitempty"`
	Algorithm      string   `json:"algorithm,omitempty"`
	Name           string   `json:"name,omitempty"`
	Replaces       []string `json:"replaces,omitempty"`
	ShadowMode     bool     `json:"shadowMode,omitempty"`
	DetailedMetric bool     `json:"detailedMetric,omitempty"`
	File           string   `json:"file"`
	Line           int      `json:"line"`
}

func (s *Server) rulesView() rulesView {
	st := s.state.Load()
	c := st.configInUse
	path := s.cfg.ConfigPath
	if s.xds != nil {
		path = "xds:" + s.cfg.XDS.ServerURL
	}
	v := rulesView{Path: path, SHA256: c.SHA256, LoadedAt: st.loadedAt.UTC(), Files: c.Files, LastError: st.lastErr}
	if st.lastErr != "" {
		t := st.lastErrAt.UTC()
		v.LastErrorAt = &t
	}
	names := make([]string, 0, len(c.Domains))
	for n := range c.Domains {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		dv := domainView{Domain: n, Descriptors: []descriptorView{}}
		c.Domains[n].Walk(func(d *rlsconfig.Descriptor) {
			if d.Limit == nil {
				return
			}
			dv.Descriptors = append(dv.Descriptors, descriptorView{
				Path: d.Path, Limit: d.Limit.String(), Algorithm: d.Limit.Params.Algorithm, Name: d.Limit.Name,
				Replaces: d.Limit.Replaces, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric,
				File: d.File, Line: d.Line,
			})
		})
		v.Domains = append(v.Domains, dv)
	}
	return v
}
