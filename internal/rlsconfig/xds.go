package rlsconfig

import (
	"cmp"
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// FromXDS builds a Config from the RateLimitConfig resources of an xDS
// server (docs/rls.md, "Config over xDS"), each read as the file of
// envoyproxy/ratelimit's format it stands for, so that a resource is
// checked exactly as a file is. Errors name a resource "xds:NAME", its
// name or else its domain, with the line of the YAML it stands for.
func FromXDS(resources []*rlsconfv3.RateLimitConfig, opt Options) (*Config, error) {
	srcs := make([]source, 0, len(resources))
	for i, r := range resources {
		data, err := yaml.Marshal(xdsRoot{Domain: r.GetDomain(), Descriptors: xdsDescriptors(r.GetDescriptors())})
		if err != nil {
			return nil, fmt.Errorf("xds resource %d: %w", i, err)
		}
		srcs = append(srcs, source{path: "xds:" + cmp.Or(r.GetName(), r.GetDomain(), fmt.Sprint(i)), data: data})
	}
	return parse(srcs, opt)
}

// The YAML that an xDS resource stands for; fields left at their zero
// value are left out, as a file would leave them.
type (
	xdsRoot struct {
		Domain      string          `yaml:"domain"`
		Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
	}
	xdsDescriptor struct {
		Key            string          `yaml:"key"`
		Value          string          `yaml:"value,omitempty"`
		RateLimit      *xdsRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []xdsDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
	}
	xdsRateLimit struct {
		Unit            string       `yaml:"unit,omitempty"`
		RequestsPerUnit uint32       `yaml:"requests_per_unit"`
		Unlimited       bool         `yaml:"unlimited,omitempty"`
		Name            string       `yaml:"name,omitempty"`
		Replaces        []xdsReplace `yaml:"replaces,omitempty"`
	}
	xdsReplace struct {
		Name string `yaml:"name"`
	}
)

func xdsDescriptors(ds []*rlsconfv3.RateLimitDescriptor) []xdsDescriptor {
	out := make([]xdsDescriptor, 0, len(ds))
	for _, d := range ds {
		x := xdsDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), Descriptors: xdsDescriptors(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
		}
		if p := d.GetRateLimit(); p != nil {
			x.RateLimit = &xdsRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
			if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
				x.RateLimit.Unit = strings.ToLower(p.GetUnit().String())
			}
			for _, r := range p.GetReplaces() {
				x.RateLimit.Replaces = append(x.RateLimit.Replaces, xdsReplace{Name: r.GetName()})
			}
		}
		out = append(out, x)
	}
	return out
}
