package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// AppFromHeader is the default Config.AppFrom: the app ID comes from the
// app header.
const AppFromHeader = "header"

// JWT reports whether c verifies callers' tokens.
func (c *Config) JWT() bool { return c.JWTJWKS != "" || c.JWTHMACSecretFile != "" }

// AppClaim returns the claim the app ID comes from, "" for the header.
func (c *Config) AppClaim() string {
	name, _ := strings.CutPrefix(c.AppFrom, "claim:")
	if name == c.AppFrom {
		return ""
	}
	return name
}

// validateJWT checks the --jwt-* flags and --app-from.
func (c *Config) validateJWT() error {
	claim, isClaim := strings.CutPrefix(c.AppFrom, "claim:")
	switch {
	case c.AppFrom != AppFromHeader && !isClaim:
		return fmt.Errorf("--app-from %q is not valid: use header, or claim:NAME for a claim of the verified token (claim:azp)", c.AppFrom)
	case isClaim && (claim == "" || strings.ContainsFunc(claim, func(r rune) bool { return r <= ' ' || r >= 0x7f })):
		return fmt.Errorf("--app-from %q names no claim: write claim:NAME, like claim:azp", c.AppFrom)
	case isClaim && !c.JWT():
		return fmt.Errorf("--app-from %s needs verified tokens: set --jwt-jwks or --jwt-hmac-secret-file", c.AppFrom)
	case c.JWTJWKSRefresh <= 0:
		return fmt.Errorf("--jwt-jwks-refresh %s is not positive", c.JWTJWKSRefresh)
	case c.JWTJWKSRefetch <= 0:
		return fmt.Errorf("--jwt-jwks-refetch %s is not positive", c.JWTJWKSRefetch)
	case c.JWTHeader == "":
		return errors.New("--jwt-header is empty: name the header that carries the token (Authorization)")
	case !c.JWT() && (c.JWTIssuer != "" || c.JWTAudience != ""):
		return errors.New("--jwt-issuer and --jwt-audience check verified tokens: set --jwt-jwks or --jwt-hmac-secret-file too")
	case c.JWT() && (strings.EqualFold(c.JWTHeader, c.AppHeader) || strings.EqualFold(c.JWTHeader, c.KeyHeader)):
		return fmt.Errorf("--jwt-header %s is also the app or key header; they must differ", c.JWTHeader)
	}
	return nil
}

// newJWT builds the verifier of the --jwt-* flags, nil without them, and
// the JWKS it keeps fresh (nil without --jwt-jwks). It reads the JWKS
// and the secret file, failing if either cannot be read.
func newJWT(cfg Config) (*jwtauth.Verifier, *jwtauth.Keys, error) {
	if !cfg.JWT() {
		return nil, nil, nil
	}
	jc := jwtauth.Config{Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience}
	var keys *jwtauth.Keys
	if cfg.JWTJWKS != "" {
		var err error
		keys, err = jwtauth.NewKeys(context.Background(), jwtauth.KeysConfig{
			Source: cfg.JWTJWKS, Refresh: cfg.JWTJWKSRefresh, Refetch: cfg.JWTJWKSRefetch,
			Logger: cfg.Logger.With("watching", "jwks"),
			Client: &http.Client{Timeout: jwtauth.DefaultFetchTimeout},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("--jwt-jwks: %w", err)
		}
		jc.Keys, jc.Refetch = keys.Current, keys.Refetch
	}
	if cfg.JWTHMACSecretFile != "" {
		data, err := safefile.Read(cfg.JWTHMACSecretFile, safefile.MaxSecretBytes)
		if err != nil {
			return nil, nil, fmt.Errorf("--jwt-hmac-secret-file: %w", err)
		}
		jc.HMACSecret = []byte(strings.TrimSpace(string(data)))
	}
	v, err := jwtauth.New(jc)
	if err != nil {
		return nil, nil, fmt.Errorf("--jwt-hmac-secret-file: %w", err)
	}
	return v, keys, nil
}
