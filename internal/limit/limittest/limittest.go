// Package limittest holds the step tables and checks that every Store of
// package limit must pass: the memory store's tests and the Redis store's
// run the same tables, so that the two stores are held to one contract.
//
// It is for tests only: production code must not import it.
package limittest

import "time"

// T0 is the instant the step tables count from: At of a StoreCall is an
// offset from it. It is a whole second, so that durations from it are
// whole microseconds (the Redis store's resolution).
var T0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
