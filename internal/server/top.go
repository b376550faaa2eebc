package server

import (
	"net/http"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
)

// topView is the JSON of GET /top.
type topView struct {
	// At is when the listing was taken.
	At time.Time `json:"at"`
	// K is how many keys each limit keeps.
	K      int                `json:"k"`
	Limits []observe.TopLimit `json:"limits"`
}

// topHandler serves GET /top[?app=ID]: per app and limit, the heaviest
// counter keys of the last minutes (docs/operations.md, "Admin port"). The keys are
// callers' values (addresses, user IDs): the admin port must stay
// internal.
func topHandler(top *observe.Top, now func() time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		at := now().UTC()
		proxy.WriteJSON(w, http.StatusOK, topView{At: at, K: top.K(), Limits: top.Snapshot(at, r.URL.Query().Get("app"))})
	}
}
