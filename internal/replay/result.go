package replay

import (
	"fmt"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// Counts counts the decisions of one rule set over some requests.
type Counts struct {
	// Requests is every request counted; Admitted + Limited.
	Requests int64
	// Admitted were forwarded (allowed, unmatched or shadow-limited).
	Admitted int64
	// Limited were answered 429.
	Limited int64
	// ShadowLimited were admitted although a shadow rule would have
	// limited them (they are among Admitted).
	ShadowLimited int64
}

func (c *Counts) add(d observe.Decision) {
	c.Requests++
	switch d {
	case observe.DecisionLimited:
		c.Limited++
	case observe.DecisionShadowLimited:
		c.Admitted++
		c.ShadowLimited++
	default:
		c.Admitted++
	}
}

// Bucket counts admitted and limited requests in one interval of a
// replay's time series, under each rule set (the baseline's are zero
// without one).
type Bucket struct {
	CandidateAdmitted, CandidateLimited int64
	BaselineAdmitted, BaselineLimited   int64
}

// Group is the requests of one app and rule, as the candidate
// classified them, and their decisions under both rule sets.
type Group struct {
	// App is the app label: a configured app ID, or "*" for every other
	// caller.
	App string
	// Rule is the matched rule pattern, "" when no rule matched.
	Rule string
	// Candidate and Baseline count the group's requests under each rule
	// set. The baseline may have matched them to other rules: the rows
	// compare the same requests, grouped the candidate's way.
	Candidate, Baseline Counts
	// Series counts the requests per interval of Result.Step from
	// Result.Origin.
	Series []Bucket
}

// LimitedChange is how many more requests the candidate limits than the
// baseline.
func (g *Group) LimitedChange() int64 { return g.Candidate.Limited - g.Baseline.Limited }

// Caller is one caller that was limited under either rule set.
type Caller struct {
	// App is the caller's configured app ID; "" for an unknown caller,
	// identified by IP.
	App string
	// IP is an unknown caller's client IP ("" if the peer had none).
	IP string
	// Candidate and Baseline count the caller's requests under each.
	Candidate, Baseline Counts
}

// Name is how the caller is shown: its app ID, or its client IP.
func (c *Caller) Name() string {
	switch {
	case c.App != "":
		return c.App
	case c.IP != "":
		return c.IP
	}
	return "(no client IP)"
}

// NewlyLimited reports whether the candidate limits the caller and the
// baseline never did.
func (c *Caller) NewlyLimited() bool { return c.Candidate.Limited > 0 && c.Baseline.Limited == 0 }

// NoLongerLimited reports whether the baseline limited the caller and the
// candidate never does.
func (c *Caller) NoLongerLimited() bool {
	return c.Baseline.Limited > 0 && c.Candidate.Limited == 0
}

// LineProblem is a line that could not be replayed as it stood.
type LineProblem struct {
	// File names the input, Line is 1-based.
	File string
	Line int64
	// Msg says what is wrong.
	Msg string
}

// String formats p as "file:line: msg".
func (p LineProblem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Result is what a replay found.
type Result struct {
	// Files are the inputs' names, in replay order.
	Files []string
	// Candidate and Baseline are the rule sets (Baseline nil if none).
	Candidate, Baseline *ruleset.Set
	// Lines is the number of lines read, blank ones included.
	Lines int64
	// Requests is the number of requests replayed.
	Requests int64
	// Invalid is the number of requests logged as invalid (400) or
	// unauthorized (401/403), refused before any limit: they are not
	// replayed.
	Invalid int64
	// Other is the number of JSON lines that are not access records (a
	// "msg" other than "access": other logs sharing the file).
	Other int64
	// Malformed is the number of lines that are not access records that
	// can be replayed; MalformedLines are the first of them.
	Malformed      int64
	MalformedLines []LineProblem
	// Late is the number of requests that were more than the reorder
	// window out of time order and were replayed late, at their own
	// time; LateLines are the first of them.
	Late      int64
	LateLines []LineProblem
	// First and Last are the times of the earliest and latest replayed
	// requests.
	First, Last time.Time
	// Origin and Step define the time series: bucket i of a Series
	// counts the requests in [Origin+i·Step, Origin+(i+1)·Step).
	Origin time.Time
	Step   time.Duration
	// Total counts every replayed request.
	Total Group
	// Groups are the requests by the candidate's app and rule, those whose
	// limited count changed most first, then by app and rule.
	Groups []*Group
	// Callers are the callers limited under either rule set: newly limited
	// ones first, then no longer limited ones, then the rest, each by how
	// much their limited count changed.
	Callers []*Caller
	// Elapsed is how long the replay took.
	Elapsed time.Duration
}

// HasBaseline reports whether the replay compared with a baseline.
func (r *Result) HasBaseline() bool { return r.Baseline != nil }
