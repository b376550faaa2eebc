package ruleset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file answers the admin port's usage API (GET /usage, POST
// /usage/reset; docs/plans-and-tokens.md): what a caller has used of each
// limit that applies to it, read from the store in use without counting
// anything, and clearing one counter.

// UsageLine is one limit of a caller, as GET /usage shows it.
type UsageLine struct {
	// API is the rule's pattern; "" for the app's total.
	API     string   `json:"api"`
	Methods []string `json:"methods,omitempty"`
	// Plan is the plan the rule comes from, "" for the app's own.
	Plan  string `json:"plan,omitempty"`
	Limit int64  `json:"limit"`
	Unit  string `json:"unit"`
	// Cost is how a request is charged ("" for one unit).
	Cost string `json:"cost,omitempty"`
	// Key is the counter's key in the store.
	Key string `json:"key,omitempty"`
	// Used, Remaining and Reset (seconds until the limit is full again)
	// are read from the store; nil when the counter is not known, for a
	// limit counted per client or per header value read without key=.
	// Used counts what charges took past the limit too, with Remaining
	// 0: 1200 of a limit of 1000.
	Used      *int64   `json:"used,omitempty"`
	Remaining *int64   `json:"remaining,omitempty"`
	Reset     *float64 `json:"reset,omitempty"`
	// Money, for a limit priced per model (cost: {price: ...}), writes
	// Limit, Used and Remaining, which count micro-units, as decimal
	// amounts of the prices' currency.
	Money *UsageMoney `json:"money,omitempty"`
	// Note says why the counter was not read.
	Note string `json:"note,omitempty"`
}

// UsageMoney is a priced limit's usage in currency units ("2.50").
type UsageMoney struct {
	Limit     string `json:"limit"`
	Used      string `json:"used,omitempty"`
	Remaining string `json:"remaining,omitempty"`
}

// ErrUnknownApp is returned for an app ID that has no section of its own.
var ErrUnknownApp = errors.New("unknown app")

// usageTarget is one limit of a section and the counter a key names.
type usageTarget struct {
	cl       *Limit
	key, tag string
	// overflow is the limit's overflow key for a keyed counter, so that
	// reading keys never grows the store past its cap.
	overflow string
	note     string
}

// usageTargets returns the rate limits of app's section ("*" for the
// unknown callers' one) and their counters for key: the suffix after the
// limit's key for limits counted per client address group or per
// header, query or claim values (with or without its leading "="), as
// /top and the access log show it; ignored for limits with one counter.
func (rs *Set) usageTargets(app, key string) ([]usageTarget, error) {
	sec := rs.unknown
	if app != config.UnknownApp {
		sec = rs.apps[app]
	}
	if sec == nil {
		return nil, fmt.Errorf("%w %q: the rules have no section for it", ErrUnknownApp, app)
	}
	if len(key) > 2*MaxKeyValueLen {
		return nil, fmt.Errorf("key is longer than %d bytes; no counter has such a key", 2*MaxKeyValueLen)
	}
	var out []usageTarget
	for _, cl := range sec.all {
		if cl.Params.Limit == limit.Unlimited {
			continue // only concurrency, or exempt
		}
		t := usageTarget{cl: cl, key: cl.Key, tag: sec.App}
		switch cl.Kind {
		case KeyIP, KeyAttrs:
			if key == "" {
				t.key, t.note = "", "counted per "+string(cl.By)+": give key= to read one caller's counter"
				break
			}
			k := key
			if cl.Kind == KeyAttrs && !strings.HasPrefix(k, "=") && !strings.Contains(k, "/") {
				k = "=" + k
			}
			t.key, t.overflow = cl.Key+"|"+k, cl.Overflow
			if sec.IPTag {
				t.tag = limit.CallerTag(k)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// ErrStore is in the error of Usage and ResetUsage when the store failed
// to read or clear a counter (not a problem of the request).
var ErrStore = errors.New("the store failed")

// Usage returns what the counters of app's limits hold in store at now,
// counting nothing: each is read with limit.Read, which starts no
// lockout. A line's used is the limit's capacity less what remains, plus
// what charges took past the limit (limit.Result's Over) and the units
// held by requests in flight (Held), which remaining leaves out.
func (rs *Set) Usage(ctx context.Context, store limit.Store, now time.Time, app, key string) ([]UsageLine, error) {
	targets, err := rs.usageTargets(app, key)
	if err != nil {
		return nil, err
	}
	lines := make([]UsageLine, 0, len(targets))
	for _, t := range targets {
		cl := t.cl
		l := UsageLine{API: cl.API, Plan: cl.Plan, Limit: cl.Params.Limit, Unit: cl.Params.Unit(), Key: t.key, Note: t.note}
		if cl.Cost.Units > 1 || cl.Cost.Header != "" || cl.BodyCost() {
			l.Cost = cl.Cost.String()
		}
		if cl.API != "" {
			if _, m, ok := strings.Cut(strings.TrimPrefix(cl.Key, cl.App+"|"+cl.API), "|"); ok {
				l.Methods = strings.Split(m, ",")
			}
		}
		if t.key != "" {
			reqs := []limit.Request{{Key: t.key, Overflow: t.overflow, Tag: t.tag, Params: &cl.Params, Act: limit.Read}}
			res := make([]limit.Result, 1)
			if _, err := store.Allow(ctx, now, reqs, res); err != nil {
				return nil, fmt.Errorf("reading %s: %w: %w", t.key, ErrStore, err)
			}
			// What charges took past the limit (a cost read from the
			// response) is used too: Remaining stays 0 then. So are
			// the units held by requests in flight (a reserve, a count
			// rule's provisional unit): a request finds room beside them.
			rem := max(res[0].Remaining-res[0].Held, 0)
			used := max(cl.Params.Capacity()-res[0].Remaining, 0) + res[0].Over + res[0].Held
			if cl.Params.Limit == 0 {
				used = 0
			}
			reset := res[0].Reset.Seconds()
			l.Used, l.Remaining, l.Reset = &used, &rem, &reset
		}
		if cl.Cost.Price != nil {
			l.Money = &UsageMoney{Limit: usage.FormatMicros(cl.Params.Limit)}
			if l.Used != nil {
				l.Money.Used, l.Money.Remaining = usage.FormatMicros(*l.Used), usage.FormatMicros(max(*l.Remaining, 0))
			}
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// ResetUsage clears the counter of app's limit on api (its pattern as the
// rules write it, "" for the app's total) for key (see Usage), in store.
// It returns the key cleared and whether the store held it.
func (rs *Set) ResetUsage(ctx context.Context, store limit.Resetter, app, api, key string) (string, bool, error) {
	targets, err := rs.usageTargets(app, key)
	if err != nil {
		return "", false, err
	}
	for _, t := range targets {
		if t.cl.API != api {
			continue
		}
		if t.key == "" {
			return "", false, errors.New(t.note)
		}
		existed, err := store.Reset(ctx, t.key, t.tag)
		if err != nil {
			return t.key, false, fmt.Errorf("clearing %s: %w: %w", t.key, ErrStore, err)
		}
		return t.key, existed, nil
	}
	return "", false, fmt.Errorf("app %q has no rate limit on api %q; GET /usage?app=%s lists them", app, api, app)
}
