package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// DefaultAllowUpgrade is the default HandlerConfig.AllowUpgrade.
var DefaultAllowUpgrade = []string{"websocket"}

// upgradeAllowList is the set of protocols a request may upgrade to, in
// lower case.
type upgradeAllowList map[string]bool

// newUpgradeAllowList checks and returns the protocols of --allow-upgrade.
// h2c is refused: its upgrade would turn the connection into an HTTP/2
// one whose requests the gateway never sees.
func newUpgradeAllowList(protocols []string) (upgradeAllowList, error) {
	allow := upgradeAllowList{}
	for _, p := range protocols {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "":
			continue
		case p == "h2c":
			return nil, fmt.Errorf("the upgrade to h2c cannot be allowed: the upstream would serve HTTP/2 requests on that connection that the gateway never counts")
		case !ruleset.ValidMethod(p): // a token, as a protocol name is
			return nil, fmt.Errorf("upgrade protocol %q is not a token", p)
		}
		allow[p] = true
	}
	return allow, nil
}

// refused reports whether r asks for a protocol upgrade the list does
// not allow. Such an upgrade is removed from what the upstream receives
// (forward.dropUpgrade), so that the request is forwarded as a plain
// request and no tunnel opens: every request sent through a tunnel would
// reach the upstream uncounted. An allowed upgrade (a WebSocket) counts
// as one request, however long the tunnel stays open.
func (allow upgradeAllowList) refused(r *http.Request) bool {
	vs, ok := r.Header["Upgrade"]
	if !ok {
		return false
	}
	for _, v := range vs {
		for _, p := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(p), "/")
			if !allow[strings.ToLower(name)] {
				return true
			}
		}
	}
	return false
}
