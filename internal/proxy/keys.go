package proxy

import (
	"net/http"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// attrValue returns the value of the header, query parameter or claim p
// names in r, as ruleset.AttrValue reads it.
func attrValue(r *http.Request, p config.KeyPart, claim func(string) (string, string)) (string, string) {
	return ruleset.AttrValue(r.Header, r.URL.RawQuery, p, claim)
}
