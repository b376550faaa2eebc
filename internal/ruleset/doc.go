// Package ruleset is the compiled, immutable form of a rule file: Compile
// turns parsed rules (package config) into a Set that says, for every
// app, which limits apply to which methods and paths, how their counter
// keys are built, where each route forwards (docs/routes.md), and the
// header values and refusal bodies each limit answers with, all built
// once. Explain says in words what a Set does with a request (gateway
// match); Usage reads a caller's counters for the admin port's /usage.
// Package proxy decides requests on a Set; server compiles and swaps
// them on reload.
//
// A Set must not be modified once compiled: a reload compiles a new one
// and swaps it in whole (the fields Limit, Section and Route export are
// read-only). The package must not read a request off the network, decide
// or forward one, hold per-request state, read the clock (Compile is
// given the time), or import proxy, server, replay or any package that
// imports them: the import graph runs one way, from cmd through server
// and replay to proxy and down to ruleset.
package ruleset
