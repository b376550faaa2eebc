// Package config reads, defaults and validates the rule file (YAML, JSON
// or XML, by extension). Package watch follows its changes.
//
// The format is the original rule file's (configs → appId → limits →
// api/limit/unit), extended with defaults, per-rule algorithms and their
// settings (burst, warmup), lockouts (lockSeconds), methods, shadow mode
// and the "*" section for unknown callers: see docs/rules.md, "Rule file"
// section. The config knows no algorithm by name: it asks the limit
// registry which settings each reads, and limit.Params.Validate for the
// rest.
package config

import (
	"crypto/sha256"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// UnknownApp is the appId of the section that applies to callers without a
// configured app ID.
const UnknownApp = "*"

// DefaultUnit is the window of a rule that sets no unit: one second, as in
// the original rule file.
const DefaultUnit = time.Second

// Rules is a parsed, defaulted and validated rule file. Its values are
// never modified after Parse returns.
type Rules struct {
	// Path is the file the rules came from ("" when parsed from memory).
	Path string
	// SHA256 is the hex sha256 of the file's bytes.
	SHA256 string
	// CaseInsensitive reports whether api patterns match paths regardless
	// of ASCII case: true unless the file sets caseSensitive: true (or
	// the older caseInsensitive: false).
	CaseInsensitive bool
	// Apps are the sections in file order, the "*" section among them if
	// present.
	Apps []App
	// Upstreams are the pools of targets routes send requests to, and
	// Routes the routes, both in file order; nil when the file has none
	// and every request goes to --upstream.
	Upstreams []Upstream
	Routes    []Route
}

// App is one section of the rule file: a caller and its limits.
type App struct {
	// ID is the appId, or UnknownApp.
	ID string
	// By says what one counter of the app's total, and of each rule
	// that sets no by of its own, is shared by: the section's by, else
	// (for configured apps) that of defaults, else ByIP for UnknownApp
	// and ByApp for configured apps.
	By By
	// Missing is what happens when a request lacks an attribute By
	// names, for the total and the rules that set none; "" means
	// MissingIP.
	Missing Missing
	// Keys are the sha256 digests of the API keys that the app's callers
	// present in the key header; when there are any, a caller naming the
	// app without one of them is refused (401). Nil for no keys.
	Keys [][sha256.Size]byte
	// Total is the app's limit across all its APIs, nil if none.
	Total *limit.Params
	// Concurrency is the most requests of the app in flight at once
	// across all its APIs, per counter of By; 0 for no such cap.
	Concurrency int64
	// TotalCost and TotalCount are the cost and count of the app's
	// total (docs/rules.md, "Request cost").
	TotalCost  Cost
	TotalCount *Count
	// TotalAlerts are the alert thresholds of the app's total, as a
	// rule's Alerts.
	TotalAlerts []int
	// Plan is the name of the plan the app takes (plan: NAME), "" for
	// none. Its rules are in Limits, after the app's own.
	Plan string
	// Limits are the per-API rules in file order: the app's own, then
	// those of its plan that none of them overrides (same api and
	// methods).
	Limits []Rule
	// Line is where the section starts in the file.
	Line int
}

// Rule is one per-API limit.
type Rule struct {
	// API is the canonical pattern (see trie.ParsePattern).
	API string
	// Methods restricts the rule to these upper-case HTTP methods; empty
	// means every method.
	Methods []string
	// Params are the limit's settings with defaults applied. Limit is
	// limit.Unlimited for a rule that sets only concurrency.
	Params limit.Params
	// Concurrency is the most requests matching the rule in flight at
	// once, per counter of By; 0 for no such cap.
	Concurrency int64
	// Cost is what a request costs the rule; the zero value is one unit.
	Cost Cost
	// Count, when not nil, counts only the requests whose response
	// status it matches.
	Count *Count
	// Shadow reports whether the rule only records what it would do and
	// never blocks (dry run).
	Shadow bool
	// By says what one counter of the rule is shared by; "" means the
	// app's By.
	By By
	// Missing is what happens when a request lacks an attribute of the
	// rule's by; "" means the app's Missing.
	Missing Missing
	// MaxDelay is how long a request over the limit may wait for room
	// before it is refused; 0 refuses at once.
	MaxDelay time.Duration
	// Plan is the plan the rule comes from, "" for a rule written in
	// its app section.
	Plan string
	// MaxBody is the most bytes of a request's body read for a key of
	// By that names a body field; 0 means DefaultMaxBody.
	MaxBody int
	// Refusal is how the rule's refusals are written, its plan's
	// filling in what it does not set (refusal.go).
	Refusal Refusal
	// Alerts are the percentages of the limit (ascending, 1..100) whose
	// crossing is told once per caller per window (alerts.go); its
	// plan's when it sets none.
	Alerts []int
	// Line is where the rule starts in the file.
	Line int
}
