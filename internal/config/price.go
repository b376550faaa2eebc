package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file reads a budget in money: cost: {price: {MODEL: {input: 2.50,
// output: 10}}}, prices per million tokens, input and output apart
// (docs/plans-and-tokens.md, "Budgets in money"). The limit then counts
// micro-units (millionths) of the prices' currency.

var priceFields = []string{"model", "input", "output"}

// priceNeeds says what price must be, for messages.
const priceNeeds = `a mapping of models to prices per million tokens, like {gpt-4o: {input: 2.50, output: 10}, "*": {input: 15, output: 60}}`

// prices reads the price field: a mapping of model names to {input,
// output}, or (as XML writes it) a list of {model, input, output}.
func (p *parser) prices(f field) (*usage.Prices, bool) {
	byModel := map[string]usage.Price{}
	lines := map[string]int{}
	ok := true
	add := func(model string, line int, n *yaml.Node) {
		if prev, dup := lines[model]; dup {
			p.errorf(line, "cost price names the model %q twice (first on line %d); keep one", model, prev)
			ok = false
			return
		}
		lines[model] = line
		pr, good := p.price(model, line, n)
		ok = ok && good
		byModel[model] = pr
	}
	switch f.val.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(f.val.Content); i += 2 {
			k, v := f.val.Content[i], deref(f.val.Content[i+1])
			if k.Kind != yaml.ScalarNode || k.Value == "" {
				p.errorf(k.Line, "cost price has a model name that is not a name; write the model as the API names it, like gpt-4o")
				ok = false
				continue
			}
			add(k.Value, k.Line, v)
		}
	case yaml.SequenceNode:
		for _, c := range f.val.Content {
			c = deref(c)
			fs := p.fields(c, "a price", priceFields)
			m, has := fs["model"]
			if !has {
				p.errorf(c.Line, "a price has no model; name the model it prices, like model: gpt-4o, or \"*\" for any other model")
				ok = false
				continue
			}
			name, good := p.str(m)
			if !good || name == "" {
				ok = false
				continue
			}
			add(name, c.Line, c)
		}
	default:
		p.errorf(f.line, "cost price must be %s, not %s", priceNeeds, p.describe(f.val))
		return nil, false
	}
	if ok && len(byModel) == 0 {
		p.errorf(f.line, "cost price names no model; list the models and their prices, like %s", priceNeeds)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	prices, err := usage.NewPrices(byModel)
	if err != nil {
		p.errorf(f.line, "cost price: %s", err)
		return nil, false
	}
	return prices, true
}

// price reads the {input, output} of model at line.
func (p *parser) price(model string, line int, n *yaml.Node) (usage.Price, bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(line, "the price of %q must be a mapping like {input: 2.50, output: 10} (per million tokens), not %s", model, p.describe(n))
		return usage.Price{}, false
	}
	fs := p.fields(n, "the price of "+model, priceFields)
	var pr usage.Price
	ok := true
	for _, side := range []struct {
		name string
		to   *int64
	}{{"input", &pr.Input}, {"output", &pr.Output}} {
		f, has := fs[side.name]
		if !has {
			p.errorf(line, "the price of %q has no %s; write what a million %s tokens cost, like %s: 2.50 (0 if they are free)", model, side.name, side.name, side.name)
			ok = false
			continue
		}
		v := f.val
		if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float" && v.ShortTag() != "!!str") {
			p.errorf(f.line, "the %s price of %q must be an amount like 2.50, not %s", side.name, model, p.describe(v))
			ok = false
			continue
		}
		micros, err := usage.ParseMicros(v.Value)
		if err != nil || micros > usage.MaxPrice {
			msg := "is above a million per million tokens"
			if err != nil {
				msg = err.Error()
			}
			p.errorf(f.line, "the %s price of %q: %s; write an amount ≥ 0 with at most six decimals, like 2.50", side.name, model, msg)
			ok = false
			continue
		}
		*side.to = micros
	}
	return pr, ok
}
