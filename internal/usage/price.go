package usage

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
)

// This file prices the tokens a response reports (cost: {price: ...};
// docs/plans-and-tokens.md, "Budgets in money"). Money is counted in
// micro-units, millionths of the currency the prices are written in (a
// micro-dollar for prices in dollars), as whole numbers: a price per
// million tokens written with up to six decimals is a whole number of
// micro-units per million tokens, so the cost of a response is exact
// before one rounding up, and adding costs never drifts.

// MicrosPerUnit is the micro-units in one unit of currency.
const MicrosPerUnit = 1_000_000

// perMillion is the tokens a price is written for.
const perMillion = 1_000_000

// MaxPrice bounds a price per million tokens, in micro-units: a million
// currency units per million tokens.
const MaxPrice = MicrosPerUnit * MicrosPerUnit

// Price is what a model's tokens cost, in micro-units per million
// tokens, input (the prompt) and output apart. The zero value is free.
type Price struct {
	Input, Output int64
}

// Cost returns what in input and out output tokens cost at p, in
// micro-units, rounded up to a whole micro-unit; MaxUsage when it is
// larger.
func (p Price) Cost(in, out int64) int64 {
	if in < 0 || out < 0 {
		return 0
	}
	hi1, lo1 := bits.Mul64(uint64(in), uint64(p.Input))
	hi2, lo2 := bits.Mul64(uint64(out), uint64(p.Output))
	lo, carry := bits.Add64(lo1, lo2, 0)
	hi, over := bits.Add64(hi1, hi2, carry)
	if over != 0 || hi >= perMillion {
		return MaxUsage
	}
	q, r := bits.Div64(hi, lo, perMillion)
	if r > 0 {
		q++
	}
	if q >= MaxUsage {
		return MaxUsage
	}
	return int64(q)
}

// Prices is a price table: a price per model name, a price per name
// prefix (a key ending in "*"), and the price of every other model (the
// key "*"). A nil *Prices prices nothing. It is immutable and safe for
// concurrent use.
type Prices struct {
	exact  map[string]Price
	prefix []prefixPrice // longest prefix first
	other  *Price
	// n is the number of entries, for String.
	n int
}

type prefixPrice struct {
	prefix string
	price  Price
}

// NewPrices returns the table of the prices by model: a name, a prefix
// followed by "*" ("gpt-4o-2024-*"), or "*" for any other model.
func NewPrices(byModel map[string]Price) (*Prices, error) {
	p := &Prices{exact: make(map[string]Price), n: len(byModel)}
	for name, pr := range byModel {
		if pr.Input < 0 || pr.Output < 0 || pr.Input > MaxPrice || pr.Output > MaxPrice {
			return nil, fmt.Errorf("the price of %q is outside 0..%d micro-units per million tokens", name, int64(MaxPrice))
		}
		switch {
		case name == "*":
			pr := pr
			p.other = &pr
		case name == "":
			return nil, errors.New("a model name is empty")
		case strings.HasSuffix(name, "*"):
			pre := strings.TrimSuffix(name, "*")
			if strings.Contains(pre, "*") {
				return nil, fmt.Errorf("the model %q has a * before its end; only a trailing * (a prefix) or \"*\" (any other model) is allowed", name)
			}
			p.prefix = append(p.prefix, prefixPrice{pre, pr})
		default:
			if strings.Contains(name, "*") {
				return nil, fmt.Errorf("the model %q has a * before its end; only a trailing * (a prefix) or \"*\" (any other model) is allowed", name)
			}
			p.exact[name] = pr
		}
	}
	sort.Slice(p.prefix, func(i, j int) bool {
		if len(p.prefix[i].prefix) != len(p.prefix[j].prefix) {
			return len(p.prefix[i].prefix) > len(p.prefix[j].prefix)
		}
		return p.prefix[i].prefix < p.prefix[j].prefix
	})
	return p, nil
}

// Named returns the price of model by its own entry: its name, else the
// longest prefix that matches it; not the price of any other model.
func (p *Prices) Named(model string) (Price, bool) {
	if p == nil || model == "" {
		return Price{}, false
	}
	if pr, ok := p.exact[model]; ok {
		return pr, true
	}
	for _, e := range p.prefix {
		if strings.HasPrefix(model, e.prefix) {
			return e.price, true
		}
	}
	return Price{}, false
}

// Other returns the price of a model the table does not name ("*"), and
// whether it has one.
func (p *Prices) Other() (Price, bool) {
	if p == nil || p.other == nil {
		return Price{}, false
	}
	return *p.other, true
}

// Resolve returns the price of a response whose body names the model
// served and whose request named the model asked for: the served
// model's when the table names it (it is the model the provider bills),
// else the asked model's, else the price of any other model. It reports
// false when none applies.
func (p *Prices) Resolve(served, asked string) (Price, bool) {
	if pr, ok := p.Named(served); ok {
		return pr, true
	}
	if pr, ok := p.Named(asked); ok {
		return pr, true
	}
	return p.Other()
}

// Len returns the number of entries of the table.
func (p *Prices) Len() int {
	if p == nil {
		return 0
	}
	return p.n
}

// ParseMicros parses a decimal amount of currency ("2.50", "0.075",
// "10") into micro-units, exactly: at most six decimals, no sign, no
// exponent.
func ParseMicros(s string) (int64, error) {
	s = strings.TrimSpace(s)
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") {
		return 0, fmt.Errorf("%q is not an amount like 2.50", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%q has more than six decimals; amounts are counted in millionths", s)
	}
	var n int64
	for _, c := range whole + frac + strings.Repeat("0", 6-len(frac)) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not an amount like 2.50: write digits and at most one dot", s)
		}
		if n > math.MaxInt64/10-1 {
			return 0, fmt.Errorf("%q is too large", s)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// FormatMicros writes micro-units as a decimal amount of currency:
// 1234567 as "1.234567", 2500000 as "2.50".
func FormatMicros(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	frac := fmt.Sprintf("%06d", n%MicrosPerUnit)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, n/MicrosPerUnit, frac)
}
