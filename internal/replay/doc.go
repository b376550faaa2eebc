// Package replay is `gateway replay`: it runs the requests of recorded
// access logs through candidate rules (and, optionally, the rules in
// force), at the instants the log recorded, and reports what each rule set
// would have admitted and limited, per rule, per caller and over time, as
// text, JSON or an HTML report (docs/replay.md).
//
// It drives the real proxy.Handler on fresh in-memory stores, so matching
// and limiting are exactly the live gateway's. It must not reach the
// network, a shared store or an upstream: a replay forwards nothing and
// changes no counter a live gateway reads. It must not read the wall
// clock for decisions (only the log's instants) and must not fail a whole
// replay on a malformed line: those are counted and reported.
package replay
