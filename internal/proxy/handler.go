package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/logthrottle"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// Defaults of HandlerConfig.
const (
	DefaultAppHeader = "X-App-Id"
	DefaultKeyHeader = "X-Api-Key"
)

// maxLimitsPerRequest is how many limits one request can meet: the app
// total and one API rule.
const maxLimitsPerRequest = observe.MaxLimits

// Handler is the proxy's request path: identify the caller, normalize and
// match the path, ask the store, then forward or reject. It is safe for
// concurrent use; the rule set is swapped atomically by SetRules.
type Handler struct {
	rules atomic.Pointer[ruleset.Set]
	// failover holds the stores and applies --fail-mode (failover.go).
	failover      *failmode.Failover
	upstream      http.Handler
	appHeader     string
	keyHeader     string
	keyAuth       string // the WWW-Authenticate value of a 401
	rejectUnknown bool
	forwardApp    bool
	trusted       []netip.Prefix
	limitStatus   int
	headers       ratelimitheader.Mode
	now           func() time.Time
	log           *slog.Logger
	observers     []observe.Observer
	override      MethodOverride
	upgrades      upgradeAllowList
	v4Bits        int
	v6Bits        int
	inFlight      inFlightCounts
	jwt           *jwtCaller // nil without JWT verification
	replay        Replay     // nil when serving
	// chargeLog keeps failed charges to a line a second.
	chargeLog logthrottle.Throttle
	// waits are the requests waiting for room (wait.go); retryJitter
	// the most added to a Retry-After.
	waits       *waiters
	retryJitter time.Duration
	// bodyMemory holds HandlerConfig.BodyMemory's bytes for bodies read
	// for keys (nil: no cap).
	bodyMemory *bodyBudget
	// bodyTimeout is HandlerConfig.BodyTimeout.
	bodyTimeout time.Duration
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Rules is the initial rule set. Required.
	Rules *ruleset.Set
	// Store decides limits. Required.
	Store limit.Store
	// Upstream forwards admitted requests: the reverse proxy NewUpstream
	// returns (replay passes a handler that only answers). Required.
	Upstream http.Handler
	// AppHeader is the header carrying the caller's app ID. Default
	// DefaultAppHeader. It is removed before forwarding unless ForwardAppHeader.
	AppHeader string
	// ForwardAppHeader passes AppHeader on to the upstream.
	ForwardAppHeader bool
	// KeyHeader carries the API key of a caller whose app has keys.
	// Default DefaultKeyHeader. It is removed before forwarding a request
	// whose key the gateway checked.
	KeyHeader string
	// RejectUnknown refuses, with 403, callers that name no configured
	// app (--unknown-callers reject); the "*" section then never applies.
	RejectUnknown bool
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// LimitStatus is the status of a limited response. Default 429.
	LimitStatus int
	// Headers selects the rate-limit headers. The zero value is both.
	Headers ratelimitheader.Mode
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives errors. Default slog.Default().
	Logger *slog.Logger
	// BodyTimeout bounds the read of the part of a request's body that a
	// limit keyed on the body (by: body:FIELD, a cost estimated from it)
	// reads before it decides, from the start of that read: a client
	// that sends it more slowly gets 408. Default DefaultBodyTimeout; the
	// server passes --read-header-timeout, since the gateway needs that
	// part as it needs the headers.
	BodyTimeout time.Duration
	// BodyMemory caps the bytes of request bodies read for keys that
	// the gateway holds at once: a request whose read would pass it is
	// refused with 503 body_memory_full, before anything is counted.
	// Default DefaultBodyMemory; negative: no cap.
	BodyMemory int64
	// Observers receive every request's outcome.
	Observers []observe.Observer
	// MethodOverride is what happens to a method override. The zero
	// value is OverrideMatch.
	MethodOverride MethodOverride
	// AllowUpgrade lists the protocols a request may upgrade to (the
	// Upgrade header); any other upgrade is removed before forwarding.
	// nil means DefaultAllowUpgrade (websocket); h2c is refused.
	AllowUpgrade []string
	// Replay, for `gateway replay` only, makes the handler decide the
	// requests of an access log as the live gateway did (see Replay).
	// nil (always, when serving) checks API keys and verifies tokens.
	Replay Replay
	// IPv4Prefix and IPv6Prefix are the lengths of the address groups
	// that per-IP counters key on. 0 means DefaultIPv4Prefix (32) and
	// DefaultIPv6Prefix (64).
	IPv4Prefix, IPv6Prefix int
	// FailMode is what happens to a request when Store fails. The zero
	// value is FailOpen.
	FailMode failmode.Mode
	// Local decides requests under FailLocal, with the limits scaled by
	// the rule set's local share. Required for FailLocal.
	Local limit.Store
	// Slots keeps the in-flight counts of concurrency limits. Default:
	// a new limit.MemorySlots.
	Slots limit.Slots
	// LocalSlots takes the slots under FailLocal when Slots fails, with
	// each concurrency scaled by the rule set's local share. Default: a
	// new limit.MemorySlots.
	LocalSlots limit.Slots
	// JWT, when not nil, verifies callers' bearer tokens: for AppClaim,
	// and for limits keyed on claims (see docs/security.md, "Verified callers
	// (JWT)").
	JWT *jwtauth.Verifier
	// JWTHeader carries the token. Default DefaultJWTHeader, whose
	// value must use the Bearer scheme.
	JWTHeader string
	// AppClaim, when not empty, is the claim of the verified token that
	// is the caller's app ID: AppHeader is then ignored and removed, and
	// a request without a valid token gets 401. Needs JWT.
	AppClaim string
	// MaxWaiting caps the requests waiting for room at once (maxDelay on
	// a rule); past it a request is refused at once. 0 means
	// DefaultMaxWaiting.
	MaxWaiting int
	// RetryAfterJitter, when at least a second, adds 0 to that many
	// whole seconds, at random, to each Retry-After the gateway sends.
	RetryAfterJitter time.Duration
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Rules == nil || cfg.Store == nil || cfg.Upstream == nil {
		return nil, errors.New("proxy: NewHandler needs Rules, Store and Upstream")
	}
	if cfg.FailMode == failmode.Local && cfg.Local == nil {
		return nil, errors.New("proxy: NewHandler needs a Local store for fail mode local")
	}
	if cfg.Slots == nil {
		cfg.Slots = limit.NewMemorySlots()
	}
	if cfg.LocalSlots == nil {
		cfg.LocalSlots = limit.NewMemorySlots()
	}
	fo, err := failmode.New(failmode.Config{
		Mode: cfg.FailMode, Store: cfg.Store, Local: cfg.Local,
		Slots: cfg.Slots, LocalSlots: cfg.LocalSlots, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	h := &Handler{
		failover:      fo,
		upstream:      cfg.Upstream,
		appHeader:     http.CanonicalHeaderKey(cfg.AppHeader),
		keyHeader:     http.CanonicalHeaderKey(cfg.KeyHeader),
		rejectUnknown: cfg.RejectUnknown,
		forwardApp:    cfg.ForwardAppHeader,
		trusted:       cfg.TrustedProxies,
		limitStatus:   cfg.LimitStatus,
		headers:       cfg.Headers,
		now:           cfg.Now,
		log:           cfg.Logger,
		observers:     cfg.Observers,
		override:      cfg.MethodOverride,
		v4Bits:        cmp.Or(cfg.IPv4Prefix, ruleset.DefaultIPv4Prefix),
		v6Bits:        cmp.Or(cfg.IPv6Prefix, ruleset.DefaultIPv6Prefix),
		waits:         newWaiters(cfg.MaxWaiting),
		retryJitter:   cfg.RetryAfterJitter,
		bodyTimeout:   cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout),
		bodyMemory:    newBodyBudget(cfg.BodyMemory),
	}
	if h.appHeader == "" {
		h.appHeader = DefaultAppHeader
	}
	if h.keyHeader == "" {
		h.keyHeader = DefaultKeyHeader
	}
	h.replay = cfg.Replay
	if h.jwt, err = newJWTCaller(cfg); err != nil {
		return nil, err
	}
	if h.v4Bits < 1 || h.v4Bits > 32 {
		return nil, fmt.Errorf("proxy: IPv4 prefix length %d is outside 1..32", h.v4Bits)
	}
	if h.v6Bits < 1 || h.v6Bits > 128 {
		return nil, fmt.Errorf("proxy: IPv6 prefix length %d is outside 1..128", h.v6Bits)
	}
	allow := cfg.AllowUpgrade
	if allow == nil {
		allow = DefaultAllowUpgrade
	}
	if h.upgrades, err = newUpgradeAllowList(allow); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if h.keyHeader == h.appHeader {
		return nil, fmt.Errorf("proxy: the key header and the app header are both %s; they must differ", h.appHeader)
	}
	h.keyAuth = `ApiKey header="` + h.keyHeader + `"`
	if h.limitStatus == 0 {
		h.limitStatus = http.StatusTooManyRequests
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.rules.Store(cfg.Rules)
	h.warnBodyMemory(cfg.Rules)
	return h, nil
}

// Rules returns the rule set in force.
func (h *Handler) Rules() *ruleset.Set { return h.rules.Load() }

// SetRules swaps in a new rule set. Requests already past matching finish
// on the set they started with.
func (h *Handler) SetRules(rs *ruleset.Set) {
	h.rules.Store(rs)
	h.warnBodyMemory(rs)
}

// Replay is how `gateway replay` (internal/replay) drives the handler on
// the requests of an access log: the only thing it changes in how a
// request is decided. A replayed request is one the live gateway let
// through, rebuilt from what its log line holds: its API key is not
// checked (the log holds none), and its claims are those the live
// gateway verified and logged, not a token's. Everything else is decided
// as when serving.
type Replay interface {
	// Claims returns the claims the live gateway verified for r, nil
	// for none. It is asked at most once per request, and only when a
	// limit counts by a claim.
	Claims(r *http.Request) *jwtauth.Claims
}
