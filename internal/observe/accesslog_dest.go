package observe

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// OpenLogDest opens an access log destination as --access-log names it:
// "stdout", "stderr", or a file path, appended to and created if need
// be. c is nil for stdout and stderr, which are not closed.
func OpenLogDest(dest string) (w io.Writer, c io.Closer, err error) {
	switch dest {
	case "stdout":
		return os.Stdout, nil, nil
	case "stderr":
		return os.Stderr, nil, nil
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening access log: %w", err)
	}
	return f, f, nil
}

// NewLogLineHandler returns the handler of the access logs: one JSON
// line per record, its time to the nanosecond in UTC.
func NewLogLineHandler(w io.Writer) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: nanoTime})
}
