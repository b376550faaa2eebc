// Package limit decides whether a request may pass a set of rate limits.
//
// Algorithms are strategies registered by name (seed 000's factory + strategy):
// each one lives in its own file and registers itself with Register in an init
// function, so adding an algorithm touches only its file. A Store keeps the
// per-key state of those algorithms and decides all of a request's limits
// atomically: a request is admitted only if every enforced limit admits it, and
// a denied request is counted against none of them.
//
// The core never reads the clock: the memory store takes now as an argument,
// so tests run on fixed instants and never sleep.
//
// The package knows nothing about HTTP.
package limit

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// Unlimited is the Limit value of a rule that never limits (seed 004).
const Unlimited = -1

// Params are the settings of one limit, resolved from the rule file with
// its defaults applied.
type Params struct {
	// Algorithm is the registered name of the algorithm.
	Algorithm string
	// Limit is the number of requests admitted per Window. -1 is
	// unlimited and 0 blocks every request.
	Limit int64
	// Window is the rule's unit. It is positive.
	Window time.Duration
	// Precision is the number of buckets per window of sliding_window.
	Precision int
	// Burst is the bucket capacity of token_bucket and leaky_bucket; 0
	// means Limit.
	Burst int64
}

// Identity reports whether p and q describe the same counter shape, so
// that state built for one can serve the other. Only Limit and Burst may
// differ: a reload that changes just the limit keeps the counts.
func (p *Params) Identity(q *Params) bool {
	return p.Algorithm == q.Algorithm && p.Window == q.Window && p.Precision == q.Precision
}

// Validate reports whether p can be used, in a sentence fit for a rule-file
// error message.
func (p *Params) Validate() error {
	if p.Limit < Unlimited {
		return fmt.Errorf("limit %d is below -1 (use -1 for unlimited, 0 to block)", p.Limit)
	}
	if p.Limit > MaxLimit {
		return fmt.Errorf("limit %d is above the maximum %d", p.Limit, int64(MaxLimit))
	}
	if p.Window <= 0 {
		return fmt.Errorf("unit %s is not positive", p.Window)
	}
	a, ok := Lookup(p.Algorithm)
	if !ok {
		return fmt.Errorf("unknown algorithm %q (known: %s)", p.Algorithm, strings.Join(Algorithms(), ", "))
	}
	return a.Validate(p)
}

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
}

// Result is the outcome of one Request.
type Result struct {
	// Allowed reports whether this limit admits the request.
	Allowed bool
	// Limit is the limit in force.
	Limit int64
	// Remaining is what is left of the limit after this decision.
	Remaining int64
	// Reset is the time until the limit is fully replenished.
	Reset time.Duration
	// RetryAfter is, for a denied request, the time until the same request
	// would be admitted; 0 when allowed.
	RetryAfter time.Duration
}

// Store keeps counter state and decides requests.
type Store interface {
	// Allow decides reqs together at now and writes one Result per
	// Request into res, which must be at least as long as reqs. It reports
	// whether every non-shadow request was admitted; only then is the
	// request counted, against every limit that admitted it (shadow limits
	// that denied are not counted). When it reports false nothing is
	// counted. Stores that keep their own clock (Redis) ignore now.
	Allow(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error)
}

// ErrUnknownAlgorithm is returned by stores given Params that name an
// algorithm that is not registered.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// Algorithm is one limiting strategy of the memory store.
//
// Implementations must be safe for concurrent use; the State values they
// create are guarded by the store.
type Algorithm interface {
	// Validate reports a problem with p that only this algorithm checks
	// (e.g. precision), in a sentence fit for a rule-file error.
	Validate(p *Params) error
	// NewState returns the state of one fresh counter for p.
	NewState(p *Params) State
}

// State is the per-key state of an Algorithm. The store serializes calls.
// now is nanoseconds since the Unix epoch.
type State interface {
	// Decide reports what admitting one request at now would give,
	// without changing the state.
	Decide(now int64, p *Params) Result
	// Commit counts one admitted request at now. It is called only after
	// Decide at the same now admitted it.
	Commit(now int64, p *Params)
	// Idle reports whether the state at now is indistinguishable from a
	// fresh one, so that the store may evict it.
	Idle(now int64, p *Params) bool
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
