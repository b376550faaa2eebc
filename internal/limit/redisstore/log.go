package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisLog is where go-redis's log lines go (Config.Logger); nil
// drops them.
var redisLog atomic.Pointer[slog.Logger]

func init() {
	// go-redis's logger is a process-wide variable without a lock: set it
	// once, before any client exists, to one that reads redisLog.
	redis.SetLogger(redisLogger{})
}

// redisLogger sends go-redis's log lines to redisLog at debug level.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
	}
}
