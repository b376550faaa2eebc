package rls

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestResetWholeSeconds reports duration_until_reset in whole seconds, as
// envoyproxy/ratelimit does, and the window's end for a request that can
// never fit.
func TestResetWholeSeconds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	for i, tc := range []struct {
		at    time.Duration
		descs string
		hits  uint32
		want  time.Duration
	}{
		// fixed: 2 a minute in windows aligned to the epoch.
		{1500 * time.Millisecond, "fixed=a", 0, 59 * time.Second},
		{20*time.Second + time.Millisecond, "fixed=b", 0, 40 * time.Second},
		// 3 hits never fit a limit of 2: the window's end, not a unit.
		{10*time.Second + 300*time.Millisecond, "sliding=c", 3, 50 * time.Second},
	} {
		h.now.Store(int64(tc.at))
		resp := h.call(t, "ext", tc.descs, tc.hits)
		d := resp.Statuses[0].GetDurationUntilReset()
		if d.GetNanos() != 0 || d.AsDuration() != tc.want {
			t.Errorf("step %d (t0+%s %s hits %d): got %v, want %v in whole seconds", i, tc.at, tc.descs, tc.hits, d.AsDuration(), tc.want)
		}
	}
}

// TestOverrideSharesCounter counts a limit override on the counter of the
// configured descriptor its entries match when it has the same unit, as
// envoyproxy/ratelimit's keys (domain, entries, window) do; an override
// of another unit has its own.
func TestOverrideSharesCounter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	call := func(unit typev3.RateLimitUnit, n uint32) *rlsv3.RateLimitResponse {
		t.Helper()
		d := descs("fixed=x")
		if n > 0 {
			d[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		}
		resp, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ext", Descriptors: d})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, tc := range []struct {
		unit typev3.RateLimitUnit
		n    uint32 // 0: no override (fixed: 2 a minute)
		want string
	}{
		{0, 0, "ok/1/2"},
		{0, 0, "ok/0/2"},
		{typev3.RateLimitUnit_MINUTE, 4, "ok/1/4"}, // the third on the shared counter
		{typev3.RateLimitUnit_MINUTE, 4, "ok/0/4"},
		{typev3.RateLimitUnit_MINUTE, 4, "over/0/4"},
		{typev3.RateLimitUnit_HOUR, 1, "ok/0/1"}, // a counter of its own
		{typev3.RateLimitUnit_HOUR, 1, "over/0/1"},
	} {
		if got := statusString(call(tc.unit, tc.n).Statuses[0]); got != tc.want {
			t.Errorf("call %d (%v %d): got %s, want %s", i, tc.unit, tc.n, got, tc.want)
		}
	}
}

// TestQuotaMode answers OK for a quota over its limit, with what is left
// of it, and tells which in the dynamic metadata.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{DynamicMetadata: true})
	run(t, h, []step{
		{0, "ext", "quota=a;pair=a", 0, ok, []string{"ok/0/1", "ok/4/5"}},
		{0, "ext", "quota=a;pair=a", 0, ok, []string{"ok/0/1", "ok/3/5"}},
	})
	resp := h.call(t, "ext", "quota=a;pair=a", 0)
	if resp.Statuses[0].DurationUntilReset != nil {
		t.Errorf("a quota over its limit: got a reset %v, want none", resp.Statuses[0].DurationUntilReset)
	}
	md, err := protojson.Marshal(resp.DynamicMetadata)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"descriptors":[{"entries":["quota=a"]},{"entries":["pair=a"]}],"domain":"ext","quotaModeEnabled":true,"quotaModeViolations":[0]}`
	if got := strings.ReplaceAll(string(md), " ", ""); got != want {
		t.Errorf("dynamic metadata:\n got %s\nwant %s", got, want)
	}
	if resp := h.call(t, "ext", "pair=b", 0); resp.DynamicMetadata.GetFields()["quotaModeEnabled"].GetBoolValue() {
		t.Errorf("no quota applied: got quotaModeEnabled true")
	}
	// The global setting makes every limit a quota.
	hq := newHarness(t, Config{QuotaMode: true})
	run(t, hq, []step{
		{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
		{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
	})
}

// TestReferenceCounting counts as envoyproxy/ratelimit does: fixed
// windows, each descriptor decided and counted on its own, and the hits
// over a limit counted (unless StopOverLimitCount).
func TestReferenceCounting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"each descriptor on its own", Config{ReferenceCounting: true}, []step{
			{0, "ext", "pair=b;pair=a", 0, ok, []string{"ok/0/1", "ok/4/5"}},
			// pair=b denies, pair=a still counts.
			{0, "ext", "pair=b;pair=a", 0, over, []string{"over/0/1", "ok/3/5"}},
			{0, "ext", "pair=a", 0, ok, []string{"ok/2/5"}},
		}},
		{"all or nothing by default", Config{}, []step{
			{0, "ext", "pair=b;pair=a", 0, ok, []string{"ok/0/1", "ok/4/5"}},
			{0, "ext", "pair=b;pair=a", 0, over, []string{"over/0/1", "ok/4/5"}},
			{0, "ext", "pair=a", 0, ok, []string{"ok/3/5"}},
		}},
		{"hits over the limit count", Config{ReferenceCounting: true}, []step{
			{0, "ext", "cost=a", 4, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=a", 3, over, []string{"over/0/5"}},
			// 7 counted: 1 more is over too.
			{0, "ext", "cost=a", 1, over, []string{"over/0/5"}},
			// A fixed window: the next minute starts afresh.
			{time.Minute, "ext", "cost=a", 1, ok, []string{"ok/4/5"}},
		}},
		{"hits over the limit left out", Config{ReferenceCounting: true, StopOverLimitCount: true}, []step{
			{0, "ext", "cost=a", 4, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=a", 3, over, []string{"over/0/5"}},
			{0, "ext", "cost=a", 1, ok, []string{"ok/0/5"}},
			// Over one limit, counted against none.
			{0, "ext", "pair=b;pair=a", 0, ok, []string{"ok/0/1", "ok/4/5"}},
			{0, "ext", "pair=b;pair=a", 0, over, []string{"over/0/1", "ok/4/5"}},
		}},
		{"sliding limits become fixed windows", Config{ReferenceCounting: true}, []step{
			{50 * time.Second, "ext", "sliding=a", 0, ok, []string{"ok/1/2"}},
			{50 * time.Second, "ext", "sliding=a", 0, ok, []string{"ok/0/2"}},
			{50 * time.Second, "ext", "sliding=a", 0, over, []string{"over/0/2"}},
			{60 * time.Second, "ext", "sliding=a", 0, ok, []string{"ok/1/2"}},
		}},
		{"shadow mode reports but admits", Config{ReferenceCounting: true, ShadowMode: true}, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
			{0, "ext", "pair=b", 0, ok, []string{"over/0/1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run(t, newHarness(t, tc.cfg), tc.steps)
		})
	}
}

// TestReferenceHeaders adds envoyproxy/ratelimit's three headers of the
// limit closest to denying, under the configured names, and none of this
// gateway's when Headers is none.
func TestReferenceHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{ReferenceHeaders: &HeaderNames{Limit: "L", Remaining: "R", Reset: "T"}, Headers: ratelimitheader.None})
	h.now.Store(int64(15 * time.Second))
	for i, tc := range []struct {
		descs string
		want  string
	}{
		{"pair=a;cost=a", "L=5 R=4 T=45"},
		{"pair=b;pair=a", "L=1 R=0 T=45"},
		{"pair=b;pair=a", "L=1 R=0 T=45"}, // denied
		{"nothing=here", ""},
	} {
		resp := h.call(t, "ext", tc.descs, 0)
		var got []string
		for _, hv := range resp.ResponseHeadersToAdd {
			got = append(got, hv.Key+"="+hv.Value)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("call %d (%s): got %v, want %s", i, tc.descs, got, tc.want)
		}
	}
}

// conformConfig holds what the differential run against
// envoyproxy/ratelimit (bench/rls/diff) found answered unlike theirs: a
// share_threshold wildcard and a quota in shadow mode.
const conformConfig = `domain: conform
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: qs
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: n
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: block
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// conformHarness is newHarness with conformConfig's domain added.
func conformHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := newHarness(t, cfg)
	c, err := rlsconfig.Parse("conform.yaml", []byte(conformConfig), rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := *h.svc.Config()
	all.Domains = maps.Clone(all.Domains)
	all.Domains["conform"] = c.Domains["conform"]
	h.svc.SetConfig(&all)
	return h
}

// TestConformance answers as envoyproxy/ratelimit where the differential
// run (bench/rls/diff) found the gateway answering otherwise, counting
// as theirs and with the gateway's defaults.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		// A descriptor named twice is counted twice, one after the
		// other: the first reports what is left after itself.
		{"repeated descriptor", Config{}, []step{
			{0, "conform", "n=a;n=a", 0, ok, []string{"ok/2/3", "ok/1/3"}},
			{0, "conform", "n=a", 0, ok, []string{"ok/0/3"}},
		}},
		{"repeated descriptor, counting as theirs", Config{ReferenceCounting: true}, []step{
			{0, "conform", "n=a;n=a", 0, ok, []string{"ok/2/3", "ok/1/3"}},
			// In turn: the first still fits, the second does not.
			{0, "conform", "n=a;n=a", 0, over, []string{"ok/0/3", "over/0/3"}},
			// The first's hits over the limit count before the second.
			{0, "conform", "n=b+5;n=b+1", 0, over, []string{"over/0/3", "over/0/3"}},
			{0, "conform", "n=b+0", 0, over, []string{"over/0/3"}},
		}},
		{"repeated descriptor over the limit by default", Config{}, []step{
			{0, "conform", "n=a+2", 0, ok, []string{"ok/1/3"}},
			// One counter asked for both: all or nothing.
			{0, "conform", "n=a;n=a", 0, over, []string{"over/0/3", "over/0/3"}},
		}},
		// An override is keyed by the request's values, not by the
		// share_threshold wildcard its entries match.
		{"override on a shared wildcard", Config{}, []step{
			{0, "conform", "files=files/a@3", 0, ok, []string{"ok/2/3"}},
			{0, "conform", "files=files/b@3", 0, ok, []string{"ok/2/3"}},
			{0, "conform", "files=files/c", 0, ok, []string{"ok/99/100"}},
		}},
		// shadow_mode wins over quota_mode: OK with its reset, and not
		// a quota violation.
		{"quota in shadow mode", Config{}, []step{
			{0, "conform", "qs=a", 0, ok, []string{"ok/0/1"}},
			{0, "conform", "qs=a", 0, ok, []string{"ok/0/1"}},
		}},
		// Counting as theirs, hits_addend 0 is OK until the count is
		// over the limit, not until one more would be.
		{"hits_addend 0, counting as theirs", Config{ReferenceCounting: true}, []step{
			{0, "conform", "n=z+0", 0, ok, []string{"ok/3/3"}},
			{0, "conform", "n=z", 3, ok, []string{"ok/0/3"}},
			{0, "conform", "n=z+0", 0, ok, []string{"ok/0/3"}},
			{0, "conform", "n=z", 0, over, []string{"over/0/3"}},
			{0, "conform", "n=z+0", 0, over, []string{"over/0/3"}},
		}},
		{"hits_addend 0 by default", Config{}, []step{
			{0, "conform", "n=z", 3, ok, []string{"ok/0/3"}},
			{0, "conform", "n=z+0", 0, over, []string{"over/0/3"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := conformHarness(t, tc.cfg)
			for i, s := range tc.steps {
				h.now.Store(int64(s.at))
				resp := h.callOverride(t, s.domain, s.descs, s.hits)
				var got []string
				for _, st := range resp.Statuses {
					got = append(got, statusString(st))
				}
				if resp.OverallCode != s.overall || strings.Join(got, " ") != strings.Join(s.statuses, " ") {
					t.Errorf("step %d (%q hits %d): got %v %v, want %v %v", i, s.descs, s.hits, resp.OverallCode, got, s.overall, s.statuses)
				}
			}
		})
	}
}

// callOverride is call, where a descriptor ending in "@N" carries a limit
// override of N a minute.
func (h *harness) callOverride(t *testing.T, domain, spec string, hits uint32) *rlsv3.RateLimitResponse {
	t.Helper()
	var overrides []uint32
	var plain []string
	for _, d := range strings.Split(spec, ";") {
		body, n, _ := strings.Cut(d, "@")
		v, _ := strconv.ParseUint(n, 10, 32)
		overrides, plain = append(overrides, uint32(v)), append(plain, body)
	}
	ds := descs(strings.Join(plain, ";"))
	for i, n := range overrides {
		if n > 0 {
			ds[i].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_MINUTE}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %s): %v", domain, spec, err)
	}
	return resp
}

// TestConformanceReset reports, counting as envoyproxy/ratelimit, the
// window's end as every duration_until_reset, a request that counts
// nothing (hits_addend 0) included; a quota in shadow mode keeps its
// reset, and is no violation.
func TestConformanceReset(t *testing.T) {
	t.Parallel()
	h := conformHarness(t, Config{ReferenceCounting: true, DynamicMetadata: true})
	h.now.Store(int64(15 * time.Second))
	for i, tc := range []struct {
		descs string
		want  time.Duration
	}{
		{"n=r+0", 45 * time.Second},
		{"n=r", 45 * time.Second},
		{"qs=r", 45 * time.Second},
		{"qs=r", 45 * time.Second}, // over its quota, in shadow mode
	} {
		resp := h.call(t, "conform", tc.descs, 0)
		if got := resp.Statuses[0].GetDurationUntilReset().AsDuration(); got != tc.want {
			t.Errorf("call %d (%s): got reset %v, want %v", i, tc.descs, got, tc.want)
		}
		if v := resp.DynamicMetadata.GetFields()["quotaModeViolations"]; v != nil {
			t.Errorf("call %d (%s): got quotaModeViolations %v, want none", i, tc.descs, v)
		}
	}
}
