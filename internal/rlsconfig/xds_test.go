package rlsconfig

import (
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestFromXDS reads RateLimitConfig resources as the files they stand for:
// a good one loads with its limits, a bad one is refused naming the
// resource and the problem, as the file would be.
func TestFromXDS(t *testing.T) {
	t.Parallel()
	good := &rlsconfv3.RateLimitConfig{Name: "default/eg", Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "rule-0-match-0", Value: "rule-0-match-0",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "x-user-id",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: "per-user"},
		}},
	}, {
		Key: "admin", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}, ShadowMode: true,
	}}}
	c, err := FromXDS([]*rlsconfv3.RateLimitConfig{good}, Options{})
	if err != nil {
		t.Fatalf("FromXDS: %v", err)
	}
	m, ok := c.Domains["eg"].Find([]Entry{{"rule-0-match-0", "rule-0-match-0"}, {"x-user-id", "alice"}})
	if !ok {
		t.Fatal("no limit for the nested descriptor")
	}
	if got := m.Descriptor.Limit.String(); !strings.HasPrefix(got, "3/minute") || m.Descriptor.Limit.Name != "per-user" {
		t.Errorf("limit: got %s named %q, want 3/minute named per-user", got, m.Descriptor.Limit.Name)
	}
	if m, ok := c.Domains["eg"].Find([]Entry{{"admin", "x"}}); !ok || !m.Descriptor.Limit.Unlimited || !m.Descriptor.ShadowMode {
		t.Errorf("admin: got %+v, %v, want an unlimited shadow descriptor", m.Descriptor, ok)
	}
	if c.Files[0].Path != "xds:default/eg" {
		t.Errorf("file: got %q, want xds:default/eg", c.Files[0].Path)
	}

	for _, tc := range []struct {
		name string
		rc   *rlsconfv3.RateLimitConfig
		want string
	}{
		{"no unit", &rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}}, `xds:n:5: invalid rate limit unit ""`},
		{"empty domain", &rlsconfv3.RateLimitConfig{Name: "n"}, "xds:n:1: config file cannot have an empty domain"},
		{"empty key", &rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Value: "v"}}}, "xds:d:3: descriptor has an empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromXDS([]*rlsconfv3.RateLimitConfig{good, tc.rc}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want …%s…", err, tc.want)
			}
		})
	}
	if _, err := FromXDS([]*rlsconfv3.RateLimitConfig{good, good}, Options{}); err == nil || !strings.Contains(err.Error(), `duplicate domain "eg"`) {
		t.Errorf("one domain twice: got %v, want a duplicate domain error", err)
	}
}
