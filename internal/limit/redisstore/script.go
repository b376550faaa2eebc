package redisstore

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// redisLua is the Redis store's script, with a placeholder line where the
// algorithms' Lua goes.
//
//go:embed redis.lua
var redisLua string

// luaPlaceholder is the line of redisLua that redisScript replaces with
// the algorithms, and luaEntry its last line, which it replaces with
// scriptEntry: the script's entry point (a Redis Functions library has
// another, redis_functions.go).
const (
	luaPlaceholder = "--ALGORITHMS--\n"
	luaEntry       = "--ENTRY--\n"
	scriptEntry    = "return decide(KEYS, ARGV)\n"
)

// redisScript returns the store's script: the key budget's helpers
// (budget.lua), then redis.lua with the Lua of every registered
// RedisAlgorithm in a table keyed by name, ending with scriptEntry. The registry is
// complete once package initialization is done, so the script is built
// once.
var redisScript = sync.OnceValues(func() (string, error) {
	var b strings.Builder
	for _, name := range limit.Algorithms() {
		a, _ := limit.Lookup(name)
		ra, ok := a.(limit.RedisAlgorithm)
		if !ok {
			continue
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return "", fmt.Errorf("limit: algorithm name %q cannot be a Lua table key", name)
			}
		}
		// Each chunk runs only when a request first uses its algorithm.
		fmt.Fprintf(&b, "A['%s'] = function()\n%s\nend\n", name, ra.Lua())
	}
	head, tail, ok := strings.Cut(redisLua, luaPlaceholder)
	if !ok {
		return "", fmt.Errorf("limit: redis.lua has no %q line", strings.TrimSpace(luaPlaceholder))
	}
	tail, ok = strings.CutSuffix(tail, luaEntry)
	if !ok {
		return "", fmt.Errorf("limit: redis.lua does not end with a %q line", strings.TrimSpace(luaEntry))
	}
	return budgetLua + head + b.String() + tail + scriptEntry, nil
})
