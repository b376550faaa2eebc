package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// UsageConfig is what the admin port's usage API reads and clears
// (docs/plans-and-tokens.md).
type UsageConfig struct {
	// Store is the store that decides, read without counting.
	Store limit.Store
	// Resetter clears a counter of Store; nil disables POST /usage/reset.
	Resetter limit.Resetter
	// Now is the clock of the reads. Default time.Now.
	Now func() time.Time
	// Logger records each reset. Default slog.Default().
	Logger *slog.Logger
}

// usageView is the JSON of GET /usage.
type usageView struct {
	App    string              `json:"app"`
	Key    string              `json:"key,omitempty"`
	Plan   string              `json:"plan,omitempty"`
	Limits []ruleset.UsageLine `json:"limits"`
}

// registerUsage adds GET /usage and POST /usage/reset (with the admin
// token) to mux.
func registerUsage(mux *http.ServeMux, rules *Reloader, u *UsageConfig, auth adminAuth) {
	now := u.Now
	if now == nil {
		now = time.Now
	}
	log := u.Logger
	if log == nil {
		log = slog.Default()
	}
	mux.Handle("GET /usage", auth.reads(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		app := q.Get("app")
		if app == "" {
			proxy.WriteError(w, http.StatusBadRequest, "missing_app", "name the caller: GET /usage?app=APP (\"*\" for callers without an app ID), and key= for limits counted per client or per header value")
			return
		}
		rs := rules.Rules()
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		lines, err := rs.Usage(ctx, u.Store, now(), app, q.Get("key"))
		if err != nil {
			usageError(w, err)
			return
		}
		v := usageView{App: app, Key: q.Get("key"), Limits: lines}
		for _, a := range rs.Source.Apps {
			if a.ID == app {
				v.Plan = a.Plan
			}
		}
		proxy.WriteJSON(w, http.StatusOK, v)
	}))
	mux.Handle("POST /usage/reset", auth.require(func(w http.ResponseWriter, r *http.Request) {
		if u.Resetter == nil {
			proxy.WriteError(w, http.StatusNotImplemented, "reset_unsupported", "the store in use cannot clear a counter")
			return
		}
		q := r.URL.Query()
		app, api, key := q.Get("app"), q.Get("api"), q.Get("key")
		if app == "" || !q.Has("api") {
			proxy.WriteError(w, http.StatusBadRequest, "missing_parameter", "name the counter: POST /usage/reset?app=APP&api=PATTERN (api= empty for the app's total), and key= for a limit counted per client or per header value")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		cleared, existed, err := rules.Rules().ResetUsage(ctx, u.Resetter, app, api, key)
		if err != nil {
			usageError(w, err)
			return
		}
		log.Info("usage counter reset from the admin port", "app", app, "api", api, "key", cleared, "existed", existed, "remote", r.RemoteAddr)
		proxy.WriteJSON(w, http.StatusOK, map[string]any{"status": "reset", "key": cleared, "existed": existed})
	}))
}

// usageError answers a failed usage request.
func usageError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ruleset.ErrUnknownApp):
		proxy.WriteError(w, http.StatusNotFound, "unknown_app", err.Error())
	case errors.Is(err, ruleset.ErrStore), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		proxy.WriteError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
	default:
		var se interface{ Timeout() bool }
		if errors.As(err, &se) {
			proxy.WriteError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
			return
		}
		proxy.WriteError(w, http.StatusBadRequest, "bad_request", err.Error())
	}
}

// usageConfig returns the usage API's settings for s's store: the Redis
// store clears counters in Redis, for the fleet; the memory store its
// own.
func (s *Server) usageConfig() *UsageConfig {
	return &UsageConfig{Store: s.st.Store(), Resetter: s.st.Resetter(), Logger: s.log}
}
