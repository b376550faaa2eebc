// Package testhook carries the Redis store's settings that only tests may
// set, from package redisstore to package redisstoretest. Being internal
// to the store, it cannot be imported by production code elsewhere; it
// must not carry anything a production caller needs.
package testhook

import "time"

// SetDecisionClock, set by package redisstore, makes cfg (a
// *redisstore.Config) build a store whose script decides at now() instead
// of at Redis's clock.
var SetDecisionClock func(cfg any, now func() time.Time)
