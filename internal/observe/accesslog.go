package observe

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// AccessLog writes one JSON line per request (--access-log). Its "time" is
// when the request arrived, the instant the limiter decided at, so that
// `gateway replay` can run a log back through other rules. It is safe for
// concurrent use.
type AccessLog struct {
	h slog.Handler
	c io.Closer // nil for stdout and stderr
	// rawKeys writes key values rather than their hashes (SetRawKeys).
	rawKeys bool
	// hasher hashes them (SetKeyHasher).
	hasher *KeyHasher
}

// OpenAccessLog opens the access log destination: "stdout", "stderr", or a
// file path, appended to.
func OpenAccessLog(dest string) (*AccessLog, error) {
	w, c, err := OpenLogDest(dest)
	if err != nil {
		return nil, err
	}
	return NewAccessLog(w, c), nil
}

// NewAccessLog returns an AccessLog writing to w; Close closes c if not nil.
func NewAccessLog(w io.Writer, c io.Closer) *AccessLog {
	return &AccessLog{h: NewLogLineHandler(w), c: c}
}

// nanoTime writes the record's time to the nanosecond (slog's default
// stops at the millisecond): replay decides at exactly the instants the
// live gateway did.
func nanoTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		return slog.String(slog.TimeKey, a.Value.Time().UTC().Format(time.RFC3339Nano))
	}
	return a
}

// ObserveRequest writes the request's line. It implements Observer.
func (a *AccessLog) ObserveRequest(o *Outcome) {
	rec := slog.NewRecord(o.Start, slog.LevelInfo, "access", 0)
	ip := ""
	if o.ClientIP.IsValid() {
		ip = o.ClientIP.String()
	}
	rec.AddAttrs(
		slog.String("app", o.App),
		slog.String("app_id", o.AppID),
		slog.String("rule", o.API),
		slog.String("method", o.Method),
		slog.String("path", o.Path),
		slog.String("client_ip", ip),
		slog.String("decision", o.Decision.String()),
		slog.Int("status", o.Status),
		slog.Float64("duration", o.Duration.Seconds()),
		slog.Float64("upstream_duration", o.UpstreamDuration.Seconds()),
	)
	if o.Route != "" {
		rec.AddAttrs(slog.String("route", o.Route), slog.String("upstream", o.Upstream))
	}
	if o.n > 0 {
		rec.AddAttrs(keyLogAttrs(o, a.rawKeys, a.hasher)...)
	}
	// docs/rules.md, "Request cost": the units counted against the rule,
	// and the cost the upstream reported, which replay charges again.
	if c := o.Cost(); c > 0 {
		rec.AddAttrs(slog.Int64("cost", c))
	}
	if o.HasUpstreamCost {
		rec.AddAttrs(slog.Int64("upstream_cost", o.UpstreamCost))
	}
	a.h.Handle(context.Background(), rec)
}

// Write writes rec as one line, to the nanosecond as ObserveRequest's
// lines: the lines of `gateway rls`'s calls, which are not the request
// path's Outcomes.
func (a *AccessLog) Write(rec slog.Record) { a.h.Handle(context.Background(), rec) }

// Close closes the log file.
func (a *AccessLog) Close() error {
	if a.c == nil {
		return nil
	}
	return a.c.Close()
}

var _ Observer = (*AccessLog)(nil)
