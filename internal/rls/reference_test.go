package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
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
