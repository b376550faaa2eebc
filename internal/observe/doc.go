// Package observe holds the observers of the gateway's requests: the
// Prometheus metrics (Metrics), the access log (AccessLog) and the
// heaviest keys of each limit behind the admin port's /top (Top). The
// request path hands each of them, through the Observer interface, one
// Outcome per request: what was decided and the snapshot of the request
// it was decided on (app, method, path, client address, the values of the
// key parts its limits count by, verified claims), read once by the
// request path.
//
// It must not decide anything, read the request itself, or import the
// request path (package proxy) or anything that imports it: observers
// only see Outcomes, and the import graph runs one way, from proxy to
// observe. Observers must be safe for concurrent use and fast, and must
// bound what they keep whatever callers send.
package observe
