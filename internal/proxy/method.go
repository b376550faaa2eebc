package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
	"github.com/ratelimit-gateway/gateway/internal/query"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// MethodOverride is what the gateway does with a method override: a
// header (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) or a
// _method query parameter, with which many frameworks (Express's
// method-override, Rails, Laravel, Symfony, ASP.NET Core) serve a POST as
// the method it names. It is a pflag.Value, for --method-override.
type MethodOverride uint8

// The choices of --method-override.
const (
	// OverrideMatch matches a POST with an override as the method it
	// names, and forwards the override. On any other method, where those
	// frameworks ignore it, the override is removed before forwarding.
	OverrideMatch MethodOverride = iota
	// OverrideStrip removes every override before forwarding: the
	// upstream sees the method the rules matched.
	OverrideStrip
)

var overrideNames = []string{"match", "strip"}

func (m MethodOverride) String() string { return enumName(overrideNames, int(m)) }

// Set parses a --method-override value.
func (m *MethodOverride) Set(s string) error {
	i, err := enumflag.Index(s, overrideNames)
	if err == nil {
		*m = MethodOverride(i)
	}
	return err
}

// Type names the flag's values in help text.
func (*MethodOverride) Type() string { return strings.Join(overrideNames, "|") }

// overrideHeaders are the method-override headers frameworks read, in
// canonical form.
var overrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// overrideParam is the query parameter of a method override.
const overrideParam = "_method"

var errConflictingOverrides = errors.New("the request names more than one method in its method-override headers or _method parameter")

// ruleMethod returns the method the rules match r by, as the upstream
// will treat it (docs/rules.md, "How a request is handled"): r's method
// upper-cased, or on a POST under OverrideMatch the method its override
// names. Overrides the upstream must not act on are marked in f, to be
// removed from what the upstream receives; r is not changed. HEAD is
// matched as GET by ruleset.Section.Match.
func (h *Handler) ruleMethod(r *http.Request, f *forward) (string, error) {
	method := ruleset.CanonicalMethod(r.Method)
	hasHeader := false
	for _, k := range overrideHeaders {
		if _, ok := r.Header[k]; ok {
			hasHeader = true
			break
		}
	}
	var params []string
	if q := r.URL.RawQuery; strings.Contains(q, overrideParam) || strings.IndexByte(q, '%') >= 0 {
		params = query.Values(q, overrideParam)
	}
	hasParam := len(params) > 0
	if !hasHeader && !hasParam {
		return method, nil
	}
	if h.override == OverrideStrip || method != http.MethodPost {
		f.dropOverrides, f.dropParam = hasHeader, hasParam
		return method, nil
	}
	named := ""
	add := func(v string) error {
		v = ruleset.CanonicalMethod(strings.TrimSpace(v))
		if v == "" {
			return nil
		}
		if named != "" && v != named {
			return errConflictingOverrides
		}
		named = v
		return nil
	}
	for _, k := range overrideHeaders {
		for _, v := range r.Header[k] {
			if err := add(v); err != nil {
				return "", err
			}
		}
	}
	for _, v := range params {
		if err := add(v); err != nil {
			return "", err
		}
	}
	if named == "" {
		return method, nil
	}
	if !ruleset.ValidMethod(named) {
		return "", errors.New("the method override names no HTTP method")
	}
	return named, nil
}

func enumName(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%d", i)
}
