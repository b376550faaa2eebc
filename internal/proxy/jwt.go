package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// DefaultJWTHeader is the header that carries a caller's token, with the
// Bearer scheme (RFC 6750 §2.1).
const DefaultJWTHeader = "Authorization"

// jwtCaller is how the handler verifies callers' tokens: nil without a
// verifier.
type jwtCaller struct {
	v      *jwtauth.Verifier
	header string // canonical
	// appClaim, when not "", is the claim the app ID comes from.
	appClaim string
}

// newJWTCaller returns the jwtCaller of cfg, nil when cfg has no JWT
// verifier.
func newJWTCaller(cfg HandlerConfig) (*jwtCaller, error) {
	if cfg.JWT == nil {
		if cfg.AppClaim != "" {
			return nil, fmt.Errorf("proxy: the app ID comes from claim %s, but there is no JWT verifier", cfg.AppClaim)
		}
		return nil, nil
	}
	j := &jwtCaller{v: cfg.JWT, header: http.CanonicalHeaderKey(cfg.JWTHeader), appClaim: cfg.AppClaim}
	if j.header == "" {
		j.header = DefaultJWTHeader
	}
	return j, nil
}

// token returns the caller's token: "" when there is none, an error when
// the header is sent more than once. In Authorization the Bearer scheme
// is required (another scheme, such as Basic, is taken as no token: it
// may be the upstream's); in another header the value is the token, with
// or without "Bearer ".
func (j *jwtCaller) token(r *http.Request) (string, error) {
	vs := r.Header[j.header]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("the %s header is sent more than once", j.header)
	}
	v := strings.TrimSpace(vs[0])
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:]), nil
	}
	if j.header == DefaultJWTHeader {
		return "", nil
	}
	return v, nil
}

// verifyClaims gives sc the caller's claims when a limit of the request
// counts by one: identify has already, when the app ID comes from a
// claim. Everything that reads a claim afterwards (the app ID, counter
// keys, the outcome's keys, the access log) reads sc's, so that a token
// is verified once per request, and only when a claim is needed. It
// answers a request whose token is invalid with 401 and reports false.
func (h *Handler) verifyClaims(w http.ResponseWriter, r *http.Request, sc *scratch) bool {
	if sc.claimsDone {
		return true
	}
	for _, cl := range sc.lims[:sc.n] {
		if cl.Claims {
			return h.verifyCaller(w, r, sc, false)
		}
	}
	for _, cl := range sc.conc[:sc.nc] {
		if cl.Claims {
			return h.verifyCaller(w, r, sc, false)
		}
	}
	return true
}

// verifyCaller keeps the caller's claims in sc: its verified token's, or
// under replay the logged ones (Replay). It runs once per request. A
// request without a token goes on without claims, unless required; one
// whose token is invalid (or missing when required) is answered 401
// (RFC 6750 §3) and verifyCaller reports false.
func (h *Handler) verifyCaller(w http.ResponseWriter, r *http.Request, sc *scratch, required bool) bool {
	if sc.claimsDone {
		return true
	}
	sc.claimsDone = true
	if h.replay != nil {
		sc.o.Claims = h.replay.Claims(r)
		return true
	}
	j := h.jwt
	if j == nil {
		return true
	}
	tok, err := j.token(r)
	if err == nil && tok == "" {
		if !required {
			return true
		}
		sc.o.Decision = observe.DecisionUnauthorized
		w.Header()["Www-Authenticate"] = []string{"Bearer"}
		WriteError(w, http.StatusUnauthorized, "missing_token",
			"the app ID comes from the "+j.appClaim+" claim of a bearer token in the "+j.header+" header; send one")
		return false
	}
	if err == nil {
		sc.o.Claims, err = j.v.Verify(tok, sc.o.Start)
	}
	if err != nil {
		h.refuseToken(w, sc, err.Error())
		return false
	}
	return true
}

// refuseToken answers a request whose token the gateway refuses.
func (h *Handler) refuseToken(w http.ResponseWriter, sc *scratch, msg string) {
	sc.o.Decision = observe.DecisionUnauthorized
	w.Header()["Www-Authenticate"] = []string{`Bearer error="invalid_token"`}
	WriteError(w, http.StatusUnauthorized, "invalid_token", msg)
}

// appFromToken returns the app ID of a caller whose app ID comes from a
// claim of its verified token, or reports false having answered 401.
// The app header is ignored (identify removes it from what the upstream
// receives): only the token says who calls.
func (h *Handler) appFromToken(w http.ResponseWriter, r *http.Request, sc *scratch) (string, bool) {
	if !h.verifyCaller(w, r, sc, true) {
		return "", false
	}
	name := h.jwt.appClaim
	app, why := sc.o.ClaimValue(name)
	switch {
	case why != "":
		h.refuseToken(w, sc, "the token's "+name+" claim "+why)
		return "", false
	case app == "":
		h.refuseToken(w, sc, "the token has no "+name+" claim, which names the app")
		return "", false
	case len(app) > config.MaxAppIDLen || !config.ValidAppID(app):
		h.refuseToken(w, sc, "the token's "+name+" claim is not an app ID: up to 128 letters, digits and . _ : -")
		return "", false
	}
	return app, true
}
