// Package redisstoretest sets what only tests may set on a Redis store
// (package redisstore): a fixed decision clock, so that tests of packages
// that use the store run on fixed instants. It is for tests only:
// production code must not import it, since a store on a fixed clock
// ignores Redis's, the one clock gateways with skewed clocks agree on.
package redisstoretest

import (
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore"
	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/internal/testhook"
)

// WithDecisionClock returns cfg with a decision clock: the store built
// from it decides at now() (whole microseconds) instead of at Redis's
// TIME, and takes no leases, whose tokens run on the gateway's clock.
func WithDecisionClock(cfg redisstore.Config, now func() time.Time) redisstore.Config {
	testhook.SetDecisionClock(&cfg, now)
	return cfg
}
