// Package limit decides whether a request may pass a set of rate limits.
//
// Algorithms are strategies registered by name, a factory of strategies:
// each one lives in its own file and registers itself with Register in an init
// function, so adding an algorithm touches only its file. A Store keeps the
// per-key state of those algorithms and decides all of a request's limits
// atomically: a request is admitted only if every enforced limit admits it, and
// a denied request is counted against none of them. Lockouts (Params.Lock,
// lockSeconds in docs/algorithms.md, "Algorithms" section) are the store's, so
// that every algorithm has them.
//
// The core never reads the clock: the memory store takes now as an argument,
// so tests run on fixed instants and never sleep; the Redis store uses
// Redis's clock (TIME), so that gateways with skewed clocks agree.
//
// The Redis store (package redisstore) runs the same algorithms in Lua:
// each one that implements RedisAlgorithm brings its own chunk, beside its
// Go file, and the store assembles them from the registry.
//
// The package must know nothing about HTTP, and nothing about Redis but
// the algorithms' Lua: it must not import the Redis store, which imports
// it.
package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultAlgorithm is the algorithm a rule uses when it names none.
const DefaultAlgorithm = "sliding_window"

// DefaultPrecision is the number of sliding-window buckets per window when a
// rule sets none.
const DefaultPrecision = 10

// MaxPrecision is the largest precision a rule may ask for.
const MaxPrecision = 1000

// MaxLimit is the largest limit a rule may set. Counters are 32-bit.
const MaxLimit = 1<<31 - 1

// Unlimited is the Limit value of a rule that never limits (limit: -1 in
// the rule file).
const Unlimited = -1

// Params are the settings of one limit, resolved from the rule file with
// its defaults applied. Params are compared with ==, so every field is a
// plain value.
type Params struct {
	// Algorithm is the registered name of the algorithm.
	Algorithm string
	// Limit is the number of requests admitted per Window. -1 is
	// unlimited and 0 blocks every request.
	Limit int64
	// Window is the rule's unit. It is positive. With a Calendar unit it
	// is the unit's nominal length (Calendar.Nominal).
	Window time.Duration
	// Calendar, when set, aligns fixed_window's windows to the calendar
	// in Zone (a calendar day, week or month) instead of to multiples of
	// Window since the Unix epoch. "" for none.
	Calendar Calendar
	// Zone is the IANA name of the time zone of a Calendar unit
	// ("Europe/Berlin"); "" is UTC. It is a name, not a *time.Location,
	// so that Params stay comparable; LoadZone caches the locations.
	Zone string
	// Precision is the number of buckets per window of sliding_window;
	// 0 for the other algorithms.
	Precision int
	// Burst is the bucket capacity of token_bucket and leaky_bucket; 0
	// means Limit.
	Burst int64
	// Warmup is the warm-up period of token_bucket (Guava RateLimiter's
	// SmoothWarmingUp): after idling, the admitted rate ramps from a third
	// of Limit per Window to the full rate over this long. 0 means none.
	Warmup time.Duration
	// Lock is the penalty lockout (lockSeconds in the rule file, see
	// docs/rules.md), for any algorithm: once the
	// limit denies a request, the store denies every request on the same
	// counter for this long. 0 means none. Stores implement it; States
	// never see it.
	Lock time.Duration
}

// Identity reports whether p and q describe the same counter shape, so
// that state built for one can serve the other.
//
// Algorithm, Window, Precision, Calendar and Zone make the shape: they decide what the
// state holds (which buckets, which windows). Limit, Burst, Warmup and
// Lock may differ: every algorithm's state reads them afresh on each
// decision, so a reload that changes only them keeps the counts and the
// new values apply from the next decision. (Lock is not part of the state
// at all: the store keeps lockouts beside it.)
func (p *Params) Identity(q *Params) bool {
	return p.Algorithm == q.Algorithm && p.Window == q.Window && p.Precision == q.Precision &&
		p.Calendar == q.Calendar && p.Zone == q.Zone
}

// Scaled returns p with Limit and Burst multiplied by share, in (0, 1],
// rounded up so that a positive limit stays positive; 0 and -1 stay as
// they are. When the scaled Params would be invalid (a bucket that refills
// too slowly), it returns p. It is how one gateway takes its share of a
// fleet's limit (--fail-mode local).
func (p Params) Scaled(share float64) Params {
	scale := func(n int64) int64 {
		if n <= 0 {
			return n
		}
		// The epsilon keeps 70 × 0.1 (7.000000000000001) at 7.
		return min(max(int64(math.Ceil(float64(n)*share-1e-9)), 1), n)
	}
	q := p
	q.Limit, q.Burst = scale(p.Limit), scale(p.Burst)
	if q.Validate() != nil {
		return p
	}
	return q
}

// Validate reports whether p can be used, in a sentence fit for a
// rule-file error message. A problem with one setting is a *SettingError
// naming that setting, so that a rule-file parser can put it on that
// setting's line.
func (p *Params) Validate() error {
	// lock formats Lock for a message: only for one, since Validate is on
	// the Redis store's request path.
	lock := func() string { return strconv.FormatFloat(p.Lock.Seconds(), 'f', -1, 64) }
	switch {
	case p.Limit < Unlimited:
		return settingErrorf("limit", "limit %d is below -1 (use -1 for unlimited, 0 to block)", p.Limit)
	case p.Limit > MaxLimit:
		return settingErrorf("limit", "limit %d is above the maximum %d", p.Limit, int64(MaxLimit))
	case p.Window <= 0:
		return settingErrorf("unit", "unit %s is not positive", p.Window)
	case p.Window > maxSpan:
		return settingErrorf("unit", "unit %s is longer than 100 years", p.Window)
	case p.Lock < 0:
		return settingErrorf("lockSeconds", "lockSeconds %s is negative", lock())
	case p.Lock > maxSpan:
		return settingErrorf("lockSeconds", "lockSeconds %s is longer than 100 years", lock())
	}
	a, ok := Lookup(p.Algorithm)
	if !ok {
		return settingErrorf("algorithm", "unknown algorithm %q (known: %s)", p.Algorithm, strings.Join(Algorithms(), ", "))
	}
	if err := p.validateCalendar(); err != nil {
		return err
	}
	return a.Validate(p)
}

// SettingError is a problem with one setting of Params.
type SettingError struct {
	// Setting is the setting's name in the rule file: "algorithm",
	// "limit", "unit" (Window, Calendar), "precision", "burst", "warmup",
	// "lockSeconds" (Lock) or "timezone" (Zone).
	Setting string
	// Err says what is wrong, in a sentence that starts with the setting
	// ("limit -2 is below -1 ...") unless it reads better otherwise
	// ("unknown algorithm ...").
	Err error
}

// Error returns Err's message.
func (e *SettingError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *SettingError) Unwrap() error { return e.Err }

// settingErrorf returns a *SettingError for setting with a message
// formatted as fmt.Errorf does.
func settingErrorf(setting, format string, args ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, args...)}
}

// maxSpan bounds the durations that algorithms add to an instant (a
// window, the time to refill a bucket, a lockout), so that instants up to
// the year 2170 plus any of them fit in an int64 of nanoseconds.
const maxSpan = 100 * 365 * 24 * time.Hour

// Request asks one store decision for one limit.
type Request struct {
	// Key names the counter, e.g. "app-1|/v1/user".
	Key string
	// Overflow, when not empty, is the key to count against instead of Key
	// when Key is new and the store holds its maximum number of keys. It is
	// set for unknown callers so that a flood of new callers cannot grow
	// memory; configured apps leave it empty.
	Overflow string
	// Params are the limit's settings. The store reads them and keeps no
	// reference past the call.
	Params *Params
	// Shadow reports whether the limit is a dry run: it is decided and
	// counted when it admits, but its denial does not deny the request.
	Shadow bool
	// Tag groups keys for a distributed store: the Redis store keeps a key
	// in the Redis Cluster hash slot of its tag ("gw:{tag}:..."), and one
	// call decides its keys atomically only if they share a slot, so the
	// requests of one call must have the same Tag. A key must always come
	// with the same Tag, or it names a different counter. Empty means the
	// part of Key before its first "|" (the app ID of the proxy's keys).
	// The memory store ignores it.
	Tag string
	// Cost is the number of units the request takes from the limit, all
	// or none: the limit admits it only if it has room for Cost units,
	// and counts Cost units when the request is admitted. A Cost above
	// the limit's Capacity is never admitted. 0 means 1, so that the zero
	// value asks for one request's worth.
	Cost int64
	// Act is what the request asks of the store; the zero value, Take,
	// decides it and counts it when admitted.
	Act Act
	// Wait, when positive, lets the call be admitted later rather than
	// refused: when its limits have no room now, the store reserves the
	// room at the earliest instant they have it, within the least Wait of
	// the enforced requests that have no room now, counts the request at
	// that instant, and reports how long from now in Result.Delay; the
	// caller holds the request until then. It is a reservation, as
	// golang.org/x/time/rate's Limiter.ReserveN makes one: what is
	// reserved is counted, whether or not the caller waits it out. A key
	// with room reserved ahead decides every later request at the end of
	// its queue: a request without Wait is refused until then. Only Take,
	// Defer and Hold requests wait; see "Waiting for room" in
	// docs/plans-and-tokens.md.
	Wait time.Duration
}

// Act is what a Request asks of a store: one decision, or one of the acts
// that follow a decision (a charge, a release), or a read. A call's
// requests may ask different acts; a Shadow request is decided as its Act
// says, but its denial does not deny the call.
type Act uint8

// The acts.
const (
	// Take decides the request and, when the call admits it, counts its
	// Cost units.
	Take Act = iota
	// Defer decides the request as Take does but counts none of its
	// units when admitted: what it costs is known only later (from the
	// upstream's response), and is counted then with a Charge. Its Result
	// reads as for a request that was not counted.
	Defer
	// Hold decides the request and, when the call admits it, holds its
	// Cost units of the limit until a Release gives them back, counting
	// none of them: it is admitted only while the limit has room for its
	// Cost units and for every unit held on the key. It is how a limit
	// whose requests count only by their response (a count of some
	// statuses) counts the requests in flight provisionally, so that no
	// more of them than its room can be in progress at once. Its Result
	// reads as Defer's, with the held units taken from Remaining. A
	// request denied only for the units held starts no lockout, and its
	// RetryAfter is at most HeldRetryAfter. The Redis store gives back the
	// units a gateway held and never released (it died) once the key has
	// seen no hold for five minutes.
	Hold
	// Release gives back Cost units that an admitted Hold request holds
	// on the same key. It decides nothing and counts nothing; its Result
	// describes the limit for a next request of one unit, as a Charge's
	// does. A release finds nothing to give back when the key's state was
	// reset (its shape changed).
	Release
	// Charge counts Cost units after the fact rather than asks for a
	// decision: they are counted whatever the limit and the call's other
	// requests decide, even past the limit, which then denies until it
	// has drained that far. A charge neither denies the call nor starts a
	// lockout. Its Result describes the limit as the charge left it, for
	// a next request of one unit: Allowed reports whether one would be
	// admitted, and Remaining is never below 0.
	Charge
	// Read decides nothing that lasts: it counts nothing, holds nothing,
	// starts no lockout and never denies the call. Its Result describes
	// the limit as it stands for a request of Cost units, as a Defer's
	// would, and the units Hold requests hold on the key (Result.Held).
	// It is what /usage, `gateway usage` and the fleet's local share
	// read.
	Read
)

// follows reports whether a is an act that follows a decision (a charge
// or a release) rather than one that takes part in it.
func (a Act) follows() bool { return a == Charge || a == Release }

// Follows reports whether r's act follows a decision (Charge, Release)
// rather than takes part in it: it neither denies the call nor is denied.
func (r *Request) Follows() bool { return r.Act.follows() }

// Enforced reports whether r's denial denies the call: it is neither a
// shadow nor a read, and its act decides.
func (r *Request) Enforced() bool { return !r.Shadow && r.Act != Read && !r.Act.follows() }

// Counts reports whether r, when its call is admitted, counts its units
// (Take) rather than defers, holds or reads them.
func (r *Request) Counts() bool { return r.Act == Take }

// HeldRetryAfter is the RetryAfter of a Hold request denied only for the
// units held by requests in flight, which may be released as soon as one
// of them is answered.
const HeldRetryAfter = time.Second

// Units returns the number of units of r: Cost, or 1 when it is 0.
func (r *Request) Units() int64 {
	if r.Cost > 0 {
		return r.Cost
	}
	return 1
}

// Capacity returns the largest Cost a request can ever be admitted with
// under p: the bucket's Burst for token_bucket and leaky_bucket when set,
// else Limit. It is not meaningful for an unlimited limit (-1).
func (p *Params) Capacity() int64 {
	return capacity(p)
}

// tooCostly returns the Result of a request of n units that p can never
// admit (n above its Capacity), and whether it is one. Like a limit of 0,
// it gives one window as the conventional wait.
func tooCostly(p *Params, n int64) (Result, bool) {
	if p.Limit <= 0 || n <= capacity(p) {
		return Result{}, false
	}
	return Result{Limit: p.Limit, Reset: p.Window, RetryAfter: p.Window}, true
}

// Result is the outcome of one Request.
type Result struct {
	// Allowed reports whether this limit admits the request.
	Allowed bool
	// Limit is the limit in force.
	Limit int64
	// Remaining is what is left of the limit after this decision: after
	// counting the request if it was counted against this limit, and as
	// the limit stands, without it, if it was not (the request was
	// denied, by this limit or another). It is 0 while the key is locked
	// out (Params.Lock) and -1 for an unlimited limit.
	Remaining int64
	// Reset is the time until the limit is fully replenished after this
	// decision, likewise with the request counted only if it was; while
	// the key is locked out, the later of that and the lockout's end.
	Reset time.Duration
	// RetryAfter is, for a denied request, the time until the same request
	// would be admitted; 0 when allowed.
	RetryAfter time.Duration
	// Delay is, for a request admitted with room reserved ahead
	// (Request.Wait), the time from now until the instant it was counted
	// at, which the caller is to wait out; 0 otherwise. Remaining and
	// Reset are the limit's as of that instant.
	Delay time.Duration
	// Over is, for a Read, the units consumed past the limit that its
	// state holds at the instant read: what charges (Charge) counted
	// beyond the limit and has not drained yet, 0 when none (Remaining is
	// 0 then). Capacity - Remaining + Over is what the limit holds. It is
	// 0 for every other act, and for a limit of 0 or -1. Per algorithm:
	// fixed_window (and calendar units) the window's count less Limit;
	// sliding_window the count of its Precision+1 buckets less Limit;
	// token_bucket the tokens owed below an empty bucket and leaky_bucket
	// the level above a full one, rounded up as Remaining is (both are
	// GCRA: how far the bucket's due instant is past now plus its
	// tolerance, in intervals of Window/Limit); sliding_log the
	// admissions in the window beyond Limit (see slState).
	Over int64
	// Held is, for a Read, the units that admitted Hold requests hold on
	// the key, not yet released: Remaining leaves them out, and a Hold
	// must find room beside them. It is 0 for every other act, and for a
	// limit of 0 or -1.
	Held int64
}

// Store keeps counter state and decides requests.
type Store interface {
	// Allow decides reqs together at now and writes one Result per
	// Request into res, which must be at least as long as reqs. It reports
	// whether every non-shadow request was admitted; only then is the
	// request counted, against every limit that admitted it (shadow limits
	// that denied are not counted), for its Cost (none for Defer). Charge
	// requests are counted whatever the others decide and do not take
	// part in the decision. When it reports false nothing is
	// counted, but a non-shadow limit with Params.Lock that denied starts
	// its lockout. Each Result describes its limit as the decision left
	// it: a limit that admitted a request that was not counted reports
	// the Remaining and Reset it has without it. Stores that keep their
	// own clock (Redis) decide on it, and use now only to place calendar
	// windows (Params.Calendar) near it.
	Allow(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error)
}

// ErrUnknownAlgorithm is returned by stores given Params that name an
// algorithm that is not registered.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// Setting is one of the fields of Params that only some algorithms read.
// The values are bits, so that a set of them is a Setting too.
type Setting uint8

// The optional settings.
const (
	SettingPrecision Setting = 1 << iota // Params.Precision
	SettingBurst                         // Params.Burst
	SettingWarmup                        // Params.Warmup
)

// Algorithm is one limiting strategy of the memory store.
//
// Implementations must be safe for concurrent use; the State values they
// create are guarded by the store.
type Algorithm interface {
	// Validate reports a problem with p that only this algorithm checks
	// (e.g. precision), in a sentence fit for a rule-file error; a
	// problem with one setting should be a *SettingError. It rejects
	// every optional setting that Reads leaves out when p sets it.
	Validate(p *Params) error
	// Reads returns the optional settings of Params that the algorithm
	// reads. A rule file's defaults of the others do not apply to rules
	// that use it.
	Reads() Setting
	// NewState returns the state of one fresh counter for p.
	NewState(p *Params) State
}

// RedisAlgorithm is an Algorithm that the Redis store can run. Lua
// returns a Lua chunk that evaluates to a table of functions — fields,
// decide, commit and over — that do in Redis what State's Decide, Commit
// and Over do in memory (decide's result also carries what State's
// UncountedReset gives), on the fields of one Redis hash, in microseconds;
// redisstore/redis.lua documents the contract and the helpers the chunk may use. The Redis
// store assembles one script from the chunks of every registered
// RedisAlgorithm, so that adding an algorithm to both stores still touches
// only its own files.
type RedisAlgorithm interface {
	Algorithm
	Lua() string
}

// State is the per-key state of an Algorithm. The store serializes calls.
// now is nanoseconds since the Unix epoch; a State never reads the clock.
type State interface {
	// Decide reports what admitting a request of n units (1 ≤ n ≤ the
	// capacity of p) at now would give, without changing the state: a
	// store decides all of a request's limits before it counts the
	// request against any of them. It admits only if the limit has room
	// for all n units. When it admits, Remaining and Reset are those after
	// counting them. The state may have been counted past the limit
	// (Commit); Remaining is never negative.
	Decide(now int64, p *Params, n int64) Result
	// UncountedReset returns the time from now until the limit is fully
	// replenished with nothing more counted: the Reset of a request
	// decided at now that is not counted, 0 when the limit is full. It
	// equals the Reset of a denial by Decide at now. The store asks for
	// it when a limit admitted a request that it did not count (another
	// limit denied it, or the key is locked out), since Decide's Reset
	// counts the request.
	UncountedReset(now int64, p *Params) time.Duration
	// Commit counts n ≥ 1 units at now. It is called after Decide at the
	// same now admitted a request of n units, and for a charge
	// (Request.Charge), which is counted even past the limit: the state
	// then denies until it has drained that far.
	Commit(now int64, p *Params, n int64)
	// Idle reports whether the state at now is indistinguishable from a
	// fresh one, so that the store may evict it.
	Idle(now int64, p *Params) bool
	// Over returns the units counted past the limit that the state holds
	// at now (Result.Over), 0 when none. Only charges (Commit past the
	// limit) leave any.
	Over(now int64, p *Params) int64
}

// fixed returns the Result of a limit that needs no state, and whether p
// is one: unlimited (-1) admits everything and is never counted, 0 blocks
// everything.
func fixed(p *Params) (Result, bool) {
	switch {
	case p.Limit < 0:
		return Result{Allowed: true, Limit: p.Limit, Remaining: -1}, true
	case p.Limit == 0:
		// Never admitted; one window is the conventional wait, and a zero
		// Reset would tell clients to come straight back.
		return Result{Limit: 0, Reset: p.Window, RetryAfter: p.Window}, true
	}
	return Result{}, false
}

// window returns p.Window in nanoseconds, at least 1: Params are validated
// before use, and the clamp only keeps a caller that skipped validation
// from dividing by zero.
func window(p *Params) int64 {
	return max(int64(p.Window), 1)
}

// Errors of Validate for an optional setting that an algorithm does not
// read.
var (
	errPrecision = &SettingError{Setting: "precision", Err: errors.New("precision applies only to sliding_window")}
	errBurst     = &SettingError{Setting: "burst", Err: errors.New("burst applies only to token_bucket and leaky_bucket")}
	errWarmup    = &SettingError{Setting: "warmup", Err: errors.New("warmup applies only to token_bucket")}
)

// unread returns the error for the first optional setting that p sets
// and reads leaves out, or nil.
func unread(p *Params, reads Setting) error {
	switch {
	case p.Precision != 0 && reads&SettingPrecision == 0:
		return errPrecision
	case p.Burst != 0 && reads&SettingBurst == 0:
		return errBurst
	case p.Warmup != 0 && reads&SettingWarmup == 0:
		return errWarmup
	}
	return nil
}

// registry is written only by Register during package initialization and
// read without a lock afterwards: Lookup is on the request path.
var registry = map[string]Algorithm{}

// Register makes an algorithm available under name. It panics if name is
// already registered or a is nil. It must be called only from an init
// function, before any Lookup.
func Register(name string, a Algorithm) {
	if a == nil {
		panic("limit: Register of nil algorithm " + name)
	}
	if _, dup := registry[name]; dup {
		panic("limit: Register called twice for " + name)
	}
	registry[name] = a
}

// Lookup returns the algorithm registered under name.
func Lookup(name string) (Algorithm, bool) {
	a, ok := registry[name]
	return a, ok
}

// Algorithms returns the registered algorithm names, sorted.
func Algorithms() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// String returns the act's name, as its constant is spelled.
func (a Act) String() string {
	switch a {
	case Take:
		return "Take"
	case Defer:
		return "Defer"
	case Hold:
		return "Hold"
	case Release:
		return "Release"
	case Charge:
		return "Charge"
	case Read:
		return "Read"
	}
	return "Act(" + strconv.Itoa(int(a)) + ")"
}
