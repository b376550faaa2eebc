// Package proxy is the gateway's request path: it identifies the caller,
// normalizes and matches the path against the rules, asks a limit.Store
// whether the request may pass, and then forwards it to the upstream or
// answers the refusal itself (docs/rules.md, "How a request is handled").
// It decides on a compiled rule set (package ruleset), which it only
// reads. It reports each request to the observers (package observe)
// through the Observer interface only, and does not know which observers
// exist.
//
// It must not start listeners, read flags or signals, or own the process:
// that is package server and cmd/gateway. It must not read the clock in
// the decision itself (the Handler takes a clock, so that replay and tests
// fix time), must not forward a request that was not counted, and must
// not import server, replay or any package that imports it: the import
// graph runs one way, from cmd through server and replay to proxy, and
// from proxy to ruleset.
package proxy
