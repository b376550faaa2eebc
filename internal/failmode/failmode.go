// Package failmode is --fail-mode: what a request gets when the store that
// decides its limits fails (docs/fleet.md, "Redis: one limit for a fleet
// of gateways"). Both commands that decide limits, gateway serve (package
// proxy) and gateway rls (package rls), put their stores behind one
// Failover, so that the mode is applied in one place and alike: the store
// decides; when it fails, open lets the request go on undecided, closed
// refuses it, and local decides it in memory on the limits' local shares
// and has the store count a local admission once (limit.AdmittedLocally).
//
// It decides and reports who decided (a Verdict); it must not build
// responses, label metrics or look at requests beyond the limits it is
// handed: those are the callers'. It must not allocate on a request the
// store decides, which is every request of the handler's hot path.
package failmode

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/logthrottle"
)

// Mode is what happens to a request when the store fails. It is a
// pflag.Value, for --fail-mode. The zero value is Open.
type Mode uint8

// The fail modes.
const (
	// Open admits the request (decision fail_open): a broken limiter must
	// not take the service down.
	Open Mode = iota
	// Closed refuses it (503 limiter_unavailable; OVER_LIMIT from gateway
	// rls).
	Closed
	// Local decides in memory with each limit scaled by the local share,
	// as if each gateway had its share of the fleet's limit.
	Local
)

var modeNames = []string{"open", "closed", "local"}

// String returns the --fail-mode value of m.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return strconv.Itoa(int(m))
}

// Set parses a --fail-mode value.
func (m *Mode) Set(s string) error {
	i, err := enumflag.Index(s, modeNames)
	if err == nil {
		*m = Mode(i)
	}
	return err
}

// Type names the flag's values in help text.
func (*Mode) Type() string { return strings.Join(modeNames, "|") }

// Verdict is who decided a request's limits: the store, or, when it
// failed, the mode.
type Verdict uint8

// The verdicts.
const (
	// StoreDecided: the store decided.
	StoreDecided Verdict = iota
	// LocalDecided: the store failed, and the local store decided on the
	// limits' local shares (Local).
	LocalDecided
	// FailedOpen: the store failed, and the request goes on undecided
	// (Open, or Local when the local store failed too).
	FailedOpen
	// FailedClosed: the store failed, and the request is refused
	// (Closed).
	FailedClosed
)

var verdictNames = []string{"store", "local", "fail_open", "fail_closed"}

// String names v in test output.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return strconv.Itoa(int(v))
}

// Config configures a Failover.
type Config struct {
	// Mode is what a failure of Store or Slots does. The zero value is
	// Open.
	Mode Mode
	// Store decides rate limits. Required.
	Store limit.Store
	// Slots takes concurrency slots. Only needed for Acquire.
	Slots limit.Slots
	// Local decides rate limits under Local when Store fails. Required
	// for Local.
	Local limit.Store
	// LocalSlots takes slots under Local when Slots fails. Only needed
	// for Acquire under Local.
	LocalSlots limit.Slots
	// Logger receives store errors, at most one a second. Default
	// slog.Default().
	Logger *slog.Logger
}

// Failover is a store, and slots, behind a fail mode. It is safe for
// concurrent use. The zero value is not usable: use New.
type Failover struct {
	cfg Config
	// errLog keeps an outage, which fails every request, to one line a
	// second.
	errLog logthrottle.Throttle
}

// New returns the Failover of cfg.
func New(cfg Config) (*Failover, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("failmode: New needs a Store")
	case cfg.Mode > Local:
		return nil, errors.New("failmode: unknown mode")
	case cfg.Mode == Local && cfg.Local == nil:
		return nil, errors.New("failmode: New needs a Local store for fail mode local")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Failover{cfg: cfg}, nil
}

// Mode returns the fail mode.
func (f *Failover) Mode() Mode { return f.cfg.Mode }

// Store returns the store that decides while it answers.
func (f *Failover) Store() limit.Store { return f.cfg.Store }

// Allow decides reqs as limit.Store's Allow does, on the store; when it
// fails, as the mode says: under Local on the local store, request i
// with the params local(i) returns and no wait for room (Request.Wait),
// without changing reqs. A local admission is counted once by the fleet
// (limit.AdmittedLocally), and alone, when not nil, is where the acts
// that follow it go (Charge). res holds the results only for
// StoreDecided and LocalDecided; allowed is false only for a denial or
// FailedClosed.
func (f *Failover) Allow(ctx context.Context, now time.Time, reqs []limit.Request, res []limit.Result, local func(i int) *limit.Params) (allowed bool, v Verdict, alone limit.Alone) {
	allowed, err := f.cfg.Store.Allow(ctx, now, reqs, res)
	if err == nil {
		return allowed, StoreDecided, nil
	}
	f.logError(ctx, err)
	switch f.cfg.Mode {
	case Closed:
		return false, FailedClosed, nil
	case Local:
		// A copy, allocated on a failure only: reqs stay the caller's.
		// A local decision reserves no room ahead (Wait): the fleet
		// counts a local admission when Redis hears of it, not at an
		// instant to come, so a request held for one would pass through
		// windows the fleet's counters fill in full once Redis is back.
		lreqs := make([]limit.Request, len(reqs))
		for i, q := range reqs {
			q.Params, q.Wait = local(i), 0
			lreqs[i] = q
		}
		allowed, lerr := f.cfg.Local.Allow(ctx, now, lreqs, res)
		if lerr == nil {
			if allowed {
				// The fleet counts it once: the store may have counted
				// the call it did not answer in time, else it writes it
				// back.
				alone = limit.AdmittedLocally(err)
			}
			return allowed, LocalDecided, alone
		}
	}
	// Fail open: a broken limiter must not take the service down.
	return true, FailedOpen, nil
}

// Charge counts charges and releases after the fact (limit.Request's
// Charge and Release) on the store that decided the request, v: the
// local one, with the params local(i) returns put in reqs, when v is
// LocalDecided; then alone, the journal Allow returned with it, takes
// them with the fleet's params, so that the fleet counts them too. A
// failed charge is the caller's to report; no fail mode applies to it
// (the Redis store writes back a charge or release that never reached
// Redis, whatever the mode: docs/fleet.md, "A slow Redis costs once").
func (f *Failover) Charge(ctx context.Context, now time.Time, v Verdict, alone limit.Alone, reqs []limit.Request, res []limit.Result, local func(i int) *limit.Params) error {
	if v != LocalDecided {
		_, err := f.cfg.Store.Allow(ctx, now, reqs, res)
		return err
	}
	if alone != nil {
		alone.Follow(now, reqs)
	}
	for i := range reqs {
		reqs[i].Params = local(i)
	}
	_, err := f.cfg.Local.Allow(ctx, now, reqs, res)
	return err
}

// Acquire takes a slot of each of reqs as limit.Slots' Acquire does, in
// the slots; when that fails, as the mode says: under Local in the local
// slots, request i with the limit local(i) returns, without changing
// reqs. permit and full are the Acquire's for StoreDecided and
// LocalDecided, else nil and -1.
func (f *Failover) Acquire(ctx context.Context, reqs []limit.SlotRequest, local func(i int) int64) (permit limit.Permit, full int, v Verdict) {
	permit, full, err := f.cfg.Slots.Acquire(ctx, reqs)
	if err == nil {
		return permit, full, StoreDecided
	}
	f.logError(ctx, err)
	switch f.cfg.Mode {
	case Closed:
		return nil, -1, FailedClosed
	case Local:
		lreqs := make([]limit.SlotRequest, len(reqs))
		for i, q := range reqs {
			q.Limit = local(i)
			lreqs[i] = q
		}
		if permit, full, err = f.cfg.LocalSlots.Acquire(ctx, lreqs); err == nil {
			return permit, full, LocalDecided
		}
	}
	// Fail open: forwarded without a slot.
	return nil, -1, FailedOpen
}

// logError logs a store error, at most once a second, unless the caller
// went away or the circuit breaker is open (the breaker's opening was
// logged by the store).
func (f *Failover) logError(ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, limit.ErrCircuitOpen) || !f.errLog.Allow(time.Now()) {
		return
	}
	f.cfg.Logger.Error("limiter failed; deciding by --fail-mode (logged at most once a second)",
		"err", err, "fail_mode", f.cfg.Mode.String())
}
