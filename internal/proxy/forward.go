package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/query"
	"go.opentelemetry.io/otel/trace"
)

// The handler decides on the request as the client sent it: every key,
// the caller, the rule matched. What the upstream receives differs from
// it (docs/rules.md, "What the upstream receives"), and those differences are
// recorded in a forward while the request is decided and applied in one
// later step, by the reverse proxy's Rewrite on its own copy (pr.Out),
// as httputil.ProxyRequest asks ("Rewrite must not modify In"). So no
// decision can read a request the gateway has already changed: a limit
// keyed on the API key header counts by the key even though the upstream
// never sees it.

// forward is what the upstream's copy of an admitted request differs in
// from the request the client sent. Its zero value changes nothing.
type forward struct {
	// path is the cleaned path that was matched ("" to keep the path).
	path string
	// realIP is the client address the gateway decided on: X-Real-Ip is
	// set to it, or removed when it is not valid.
	realIP netip.Addr
	// app is the app header's canonical name; dropApp removes it unless
	// setApp, which sets it to the verified app ID.
	app             string
	dropApp, setApp bool
	appID           string
	// key is the key header's canonical name, removed when dropKey.
	key     string
	dropKey bool
	// keyed are the headers the rule set's limits are keyed on: their
	// spellings with underscores are removed, as are the app and key
	// headers' (see dropAliases).
	keyed []string
	// dropOverrides removes the method-override headers, dropParam the
	// _method query parameter, dropUpgrade an upgrade not allowed.
	dropOverrides, dropParam, dropUpgrade bool
	// readBody reports that a limit reads the response body (tokens.go):
	// the upstream is asked only for content codings the gateway reads.
	readBody bool
	// client is the context of the client's request, when the upstream's
	// request is not canceled with it (a limit charged by the response):
	// the errors of the upstream's request are judged by it.
	client context.Context
	// span is the upstream request's client span while it is open
	// (trace.go).
	span trace.Span
}

// clientContext returns the context of the client's request behind the
// upstream's request r.
func clientContext(r *http.Request) context.Context {
	if f, ok := r.Context().Value(forwardKey{}).(*forward); ok && f.client != nil {
		return f.client
	}
	return r.Context()
}

// forwardKey is the context key of a request's *forward.
type forwardKey struct{}

// rewriteForward applies the forward the handler attached to pr.In, if
// any, to pr.Out. It runs before the upstream URL is joined with the
// path.
func rewriteForward(pr *httputil.ProxyRequest) {
	if f, ok := pr.In.Context().Value(forwardKey{}).(*forward); ok && f != nil {
		f.apply(pr.Out)
	}
}

// apply makes out the request the upstream is to receive.
func (f *forward) apply(out *http.Request) {
	hdr := out.Header
	if f.path != "" {
		out.URL.Path, out.URL.RawPath = f.path, ""
	}
	// What the gateway decided, never what the client claimed.
	if f.realIP.IsValid() {
		hdr["X-Real-Ip"] = []string{f.realIP.String()}
	} else {
		delete(hdr, "X-Real-Ip")
	}
	if f.dropKey {
		delete(hdr, f.key)
	}
	switch {
	case f.setApp:
		hdr[f.app] = []string{f.appID}
	case f.dropApp:
		delete(hdr, f.app)
	}
	if f.dropOverrides {
		for _, k := range overrideHeaders {
			delete(hdr, k)
		}
	}
	if f.dropParam {
		out.URL.RawQuery = query.Without(out.URL.RawQuery, overrideParam)
	}
	if f.dropUpgrade {
		// ReverseProxy has put back Connection: Upgrade for the upgrade it
		// saw; without both the upstream sees a plain request, and a 101
		// from it is refused.
		delete(hdr, "Upgrade")
		delete(hdr, "Http2-Settings")
		if vs := hdr["Connection"]; len(vs) == 1 && strings.EqualFold(vs[0], "upgrade") {
			delete(hdr, "Connection")
		}
	}
	if f.readBody {
		readableEncodings(hdr)
	}
	dropAliases(hdr, f.app, f.key, f.keyed)
}

// dropAliases removes the headers that spell one of names with
// underscores (X_App_Id for X-App-Id): the gateway never reads them, but
// CGI-style upstreams (PHP-FPM, some WSGI servers) fold them into the same
// variable as the real header, so they would pass an unchecked app ID or
// key, or a value a limit keyed on the header counted as missing.
func dropAliases(hdr http.Header, app, key string, keyed []string) {
	for k := range hdr {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		if sameUnderscored(k, app) || sameUnderscored(k, key) {
			delete(hdr, k)
			continue
		}
		for _, name := range keyed {
			if sameUnderscored(k, name) {
				delete(hdr, k)
				break
			}
		}
	}
}
