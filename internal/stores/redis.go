package stores

import "github.com/ratelimit-gateway/gateway/internal/limit/redisstore"

// Redis returns the Redis store when it is the one in use, else nil, for
// what a fleet shares besides its counters: budget alerts claim each
// threshold once per fleet with its Once (docs/plans-and-tokens.md,
// "Budget alerts").
func (s *Stores) Redis() *redisstore.Store { return s.st.redis }
