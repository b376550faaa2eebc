package redisstore

import (
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit/redisstore/internal/testhook"
)

func init() {
	testhook.SetDecisionClock = func(cfg any, now func() time.Time) {
		cfg.(*Config).decisionClock = now
	}
}
