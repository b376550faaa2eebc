package redisstore

import (
	"embed"
	"fmt"
	"strings"
	"sync"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// redisLuaFiles are the files of the Redis store's script after
// budget.lua, in the order they are assembled: each uses only what those
// before it define (Lua's locals are seen only below their definition).
// redis.lua holds the script's contract, and the placeholder line where
// the algorithms' Lua goes; redis_entry.lua ends with luaEntry.
var redisLuaFiles = []string{"redis.lua", "redis_state.lua", "redis_decide.lua", "redis_acts.lua", "redis_entry.lua"}

//go:embed redis.lua redis_state.lua redis_decide.lua redis_acts.lua redis_entry.lua
var redisLuaFS embed.FS

// luaPlaceholder is the line of the script that redisScript replaces with
// the algorithms, and luaEntry its last line, which it replaces with
// scriptEntry: the script's entry point (a Redis Functions library has
// another, functions.go).
const (
	luaPlaceholder = "--ALGORITHMS--\n"
	luaEntry       = "--ENTRY--\n"
	scriptEntry    = "return decide(KEYS, ARGV)\n"
)

// redisScript returns the store's script: the key budget's helpers
// (budget.lua), then redisLuaFiles with the Lua of every registered
// RedisAlgorithm in a table keyed by name, ending with scriptEntry. The registry is
// complete once package initialization is done, so the script is built
// once.
var redisScript = sync.OnceValues(func() (string, error) {
	var src strings.Builder
	for _, f := range redisLuaFiles {
		data, err := redisLuaFS.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("limit: reading %s: %w", f, err)
		}
		if len(data) == 0 || data[len(data)-1] != '\n' {
			return "", fmt.Errorf("limit: %s does not end with a new line", f)
		}
		src.Write(data)
	}
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
	head, tail, ok := strings.Cut(src.String(), luaPlaceholder)
	if !ok {
		return "", fmt.Errorf("limit: the script has no %q line", strings.TrimSpace(luaPlaceholder))
	}
	tail, ok = strings.CutSuffix(tail, luaEntry)
	if !ok {
		return "", fmt.Errorf("limit: the script does not end with a %q line", strings.TrimSpace(luaEntry))
	}
	return budgetLua + head + b.String() + tail + scriptEntry, nil
})
