package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/redis/go-redis/v9"
)

// redisFunctions is the store's script as a Redis Functions library
// (Redis 7 and later: FUNCTION LOAD, FCALL; docs/fleet.md, "How a
// decision is made"). A script (EVALSHA) runs its whole source on every
// call, defining its helpers and the algorithms' functions again each
// time; a library runs it once, when it is loaded, and a call runs only
// the decision, with the rules' settings parsed once (redis.lua). The
// decisions are the same: both run the one source.
//
// The library and its one function are named by a hash of the script, so
// that gateways of different versions on one Redis each call their own.
// A Redis that has no FUNCTION command (before 7), or whose ACL denies it
// or FCALL, is sent EVALSHA instead, as one that loses the library
// (FUNCTION FLUSH, a restart without persistence) is sent EVAL until it
// is loaded again. It is safe for concurrent use.
type redisFunctions struct {
	lib  string // the library's source
	name string // the library's name and its function's
	// on reports whether calls use FCALL: the library was loaded and
	// answered. denied is set once a node refused it: calls use EVALSHA
	// from then on. off, set by tests before the first warm-up, keeps
	// them on EVALSHA.
	on, denied atomic.Bool
	off        bool
	// stale is set while a node has lost the library: calls ask for a
	// warm-up (at most one a second) until one has loaded it again.
	stale atomic.Bool
}

// newRedisFunctions returns the library of script, the store's script
// (redisScript), whose last line is scriptEntry.
func newRedisFunctions(script string) (*redisFunctions, error) {
	body, ok := strings.CutSuffix(script, scriptEntry)
	if !ok {
		return nil, fmt.Errorf("limit: the script does not end with %q", strings.TrimSpace(scriptEntry))
	}
	sum := sha1.Sum([]byte(script))
	name := "gateway_" + hex.EncodeToString(sum[:8])
	lib := "#!lua name=" + name + "\n" + body + "redis.register_function('" + name + "', entry)\n"
	return &redisFunctions{lib: lib, name: name}, nil
}

// load loads the library on c's node, unless calls use EVALSHA for good,
// and checks that FCALL runs it: a call with no limit decides nothing and
// writes nothing. A node that does not know the commands (before Redis 7)
// or whose ACL denies them (NOPERM) turns the library off for the store;
// another answer (OOM, LOADING) leaves the calls on EVALSHA until a later
// warm-up loads it; an error of the connection is returned.
func (f *redisFunctions) load(ctx context.Context, c *redis.Client) error {
	if f.off || f.denied.Load() {
		return nil
	}
	err := c.FunctionLoadReplace(ctx, f.lib).Err()
	if err == nil {
		err = c.FCall(ctx, f.name, nil, "", 0).Err()
	}
	switch {
	case err == nil:
		f.on.Store(true)
		f.stale.Store(false)
	case isNoFunctions(err):
		f.denied.Store(true)
		f.on.Store(false)
	case isScriptError(err):
		f.on.Store(false)
		f.stale.Store(true)
	default:
		return fmt.Errorf("loading the function library: %w", err)
	}
	return nil
}

// lost turns FCALL off when err says that a node lost the library, until
// a warm-up loads it again: meanwhile the calls go as EVALSHA, whose
// script the EVAL after a lost library has cached.
func (f *redisFunctions) lost(err error) {
	if isNoFunction(err) {
		f.on.Store(false)
		f.stale.Store(true)
	}
}

// scriptCmd returns the command that runs the decision for keys and args
// on c: FCALL when the library is on, else EVALSHA.
func (r *Store) scriptCmd(ctx context.Context, c redis.Cmdable, keys []string, args []any) *redis.Cmd {
	f := r.fn
	if f.on.Load() {
		return c.FCall(ctx, f.name, keys, args...)
	}
	if f.stale.Load() {
		r.rewarm()
	}
	return c.EvalSha(ctx, r.sha, keys, args...)
}

// isNoFunctions reports whether err is a Redis's answer that it will not
// run functions for this client: it does not know FUNCTION or FCALL
// (before 7), or the user's ACL denies them.
func isNoFunctions(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "unknown subcommand")
}

// isNoFunction reports whether err is Redis's answer to FCALL of a
// function it does not have (FUNCTION FLUSH, a restart without
// persistence).
func isNoFunction(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found")
}

// settingsParts are what a limit's settings argument says: its params,
// and whether the store keeps counters as hashes.
type settingsParts struct {
	p      limit.Params
	hashes bool
}

// settingsArg returns the settings argument of s.p (redis.lua), which the
// calls of a rule share (reused).
func settingsArg(s settingsParts) string {
	if s.hashes {
		return scriptSettings(&s.p) + " h"
	}
	return scriptSettings(&s.p)
}

// scriptSettings returns the settings argument of p (redis.lua):
// "algorithm/window/precision limit burst warmup lock", durations in µs,
// and " c" for a calendar unit, whose windows follow in an argument of
// their own (calendarArg).
func scriptSettings(p *limit.Params) string {
	b := make([]byte, 0, 64)
	b = append(b, p.Algorithm...)
	b = append(b, '/')
	b = strconv.AppendInt(b, micros(p.Window), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(p.Precision), 10)
	for _, v := range [...]int64{p.Limit, p.Burst, micros(p.Warmup), micros(p.Lock)} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	if p.Calendar != "" {
		b = append(b, " c"...)
	}
	return string(b)
}
