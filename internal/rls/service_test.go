package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-gateway/gateway/internal/failmode"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
)

// t0 is the tests' fixed start, at a whole minute so that fixed windows
// start there.
var t0 = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

// testConfig is envoyproxy/ratelimit's example domain "rl"
// (internal/rlsconfig/testdata/envoyproxy/examples/config.yaml) plus a
// domain of this gateway's extensions.
const extConfig = `domain: ext
descriptors:
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: cost
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: pair
    value: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: pair
    value: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: locked
    rate_limit: {unit: second, requests_per_unit: 1, lock_seconds: 60}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// harness is a Service behind a real gRPC server on a loopback port,
// with a real client.
type harness struct {
	svc    *Service
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	reg    *prometheus.Registry
	now    atomic.Int64 // offset from t0
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry()}
	cfg.Now = func() time.Time { return t0.Add(time.Duration(h.now.Load())) }
	cfg.Metrics = observe.NewRLSMetrics(h.reg)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Store == nil {
		mem, err := limit.NewMemory(limit.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = mem
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	examples, err := rlsconfig.Load("../rlsconfig/testdata/envoyproxy/examples", rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := rlsconfig.Parse("ext.yaml", []byte(extConfig), rlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	examples.Domains["ext"] = ext.Domains["ext"]
	svc.SetConfig(examples)
	h.svc = svc
	srv, _ := NewGRPCServer(svc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		wg.Wait()
	})
	h.conn, h.client = conn, rlsv3.NewRateLimitServiceClient(conn)
	return h
}

// descs parses "k=v,k=v;k=v" into descriptors; a descriptor ending in
// "+N" has a hits_addend of N.
func descs(spec string) []*rlv3.RateLimitDescriptor {
	var out []*rlv3.RateLimitDescriptor
	for _, d := range strings.Split(spec, ";") {
		desc := &rlv3.RateLimitDescriptor{}
		if body, hits, ok := strings.Cut(d, "+"); ok {
			n := uint64(0)
			for _, c := range hits {
				n = n*10 + uint64(c-'0')
			}
			desc.HitsAddend = wrapperspb.UInt64(n)
			d = body
		}
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		out = append(out, desc)
	}
	return out
}

// step is one call at a fixed instant and what it must answer.
type step struct {
	at      time.Duration // from t0
	domain  string
	descs   string
	hits    uint32
	overall rlsv3.RateLimitResponse_Code
	// statuses are "code/remaining/limit" per descriptor: "ok/1/2",
	// "over/0/2", "ok/-/-" for a descriptor without a limit, "ok/max/-"
	// for an unlimited one.
	statuses []string
}

func (h *harness) call(t *testing.T, domain, spec string, hits uint32) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs(spec), HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %s): %v", domain, spec, err)
	}
	return resp
}

func statusString(s *rlsv3.RateLimitResponse_DescriptorStatus) string {
	code := "ok"
	if s.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
		code = "over"
	}
	rem, lim := "-", "-"
	switch {
	case s.LimitRemaining == math.MaxUint32:
		rem = "max"
	case s.CurrentLimit != nil:
		rem = itoa(int64(s.LimitRemaining))
	}
	if s.CurrentLimit != nil {
		lim = itoa(int64(s.CurrentLimit.RequestsPerUnit))
	}
	return code + "/" + rem + "/" + lim
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

func run(t *testing.T, h *harness, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.now.Store(int64(s.at))
		resp := h.call(t, s.domain, s.descs, s.hits)
		var got []string
		for _, st := range resp.Statuses {
			got = append(got, statusString(st))
		}
		if resp.OverallCode != s.overall || strings.Join(got, " ") != strings.Join(s.statuses, " ") {
			t.Errorf("step %d (t0+%s %s %q hits %d): got %v %v, want %v %v", i, s.at, s.domain, s.descs, s.hits,
				resp.OverallCode, got, s.overall, s.statuses)
		}
	}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestShouldRateLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"key without value: a counter per value", []step{
			{0, "rl", "foo=a", 0, ok, []string{"ok/1/2"}},
			{0, "rl", "foo=a", 0, ok, []string{"ok/0/2"}},
			{0, "rl", "foo=a", 0, over, []string{"over/0/2"}},
			{0, "rl", "foo=b", 0, ok, []string{"ok/1/2"}},
		}},
		{"nested value beats default", []step{
			{0, "rl", "foo=x,bar=bkthomps", 0, ok, []string{"ok/0/1"}},
			{0, "rl", "foo=x,bar=bkthomps", 0, over, []string{"over/0/1"}},
			{0, "rl", "foo=x,bar=other", 0, ok, []string{"ok/2/3"}},
		}},
		{"limit 0 blocks", []step{
			{0, "rl", "foo=x,bar=banned", 0, over, []string{"over/0/0"}},
		}},
		{"no limit and unknown", []step{
			{0, "rl", "nothing=here", 0, ok, []string{"ok/-/-"}},
			{0, "rl", "source_cluster=proxy", 0, ok, []string{"ok/-/-"}},
			{0, "rl", "foo=x,bar=y,deeper=z", 0, ok, []string{"ok/-/-"}},
			{0, "nosuchdomain", "foo=x", 0, ok, []string{"ok/-/-"}},
		}},
		{"unlimited", []step{
			{0, "rl", "qux=1", 0, ok, []string{"ok/max/-"}},
			{0, "rl", "foo=x,bay=1", 0, ok, []string{"ok/max/-"}},
		}},
		{"shadow mode counts but never denies", []step{
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/2/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/1/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/0/3"}},
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/0/3"}},
		}},
		{"replaces drops the named limit", []step{
			// foo.bar=bkthomps (named bkthomps, 1/min) is replaced by
			// category=account's limit in the same request, so only the
			// 4/min applies.
			{0, "rl", "category=account;foo=x,bar=bkthomps", 0, ok, []string{"ok/3/4", "ok/-/-"}},
			{0, "rl", "category=account;foo=x,bar=bkthomps", 0, ok, []string{"ok/2/4", "ok/-/-"}},
			// Alone, it is not replaced, and was not counted.
			{0, "rl", "foo=x,bar=bkthomps", 0, ok, []string{"ok/0/1"}},
			{0, "rl", "foo=x,bar=bkthomps", 0, over, []string{"over/0/1"}},
		}},
		{"hits_addend", []step{
			{0, "ext", "cost=1", 3, ok, []string{"ok/2/5"}},
			{0, "ext", "cost=1", 3, over, []string{"over/0/5"}},
			{0, "ext", "cost=1", 2, ok, []string{"ok/0/5"}},
			{0, "ext", "cost=2", 6, over, []string{"over/0/5"}},
			{0, "ext", "cost=2", 5, ok, []string{"ok/0/5"}},
		}},
		{"per-descriptor hits_addend, 0 checks only", []step{
			{0, "ext", "cost=3+4", 0, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=3+0", 0, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=3+0", 0, ok, []string{"ok/1/5"}},
			{0, "ext", "cost=3+1", 0, ok, []string{"ok/0/5"}},
			{0, "ext", "cost=3+0", 0, over, []string{"over/0/5"}},
		}},
		{"several descriptors all or nothing", []step{
			{0, "ext", "pair=a;pair=b", 0, ok, []string{"ok/4/5", "ok/0/1"}},
			// b denies: a is not counted, and says so.
			{0, "ext", "pair=a;pair=b", 0, over, []string{"ok/4/5", "over/0/1"}},
			{0, "ext", "pair=a;pair=b", 0, over, []string{"ok/4/5", "over/0/1"}},
			{0, "ext", "pair=a", 0, ok, []string{"ok/3/5"}},
		}},
		{"a repeated descriptor counts twice", []step{
			// One after the other, as envoyproxy/ratelimit reports them.
			{0, "ext", "pair=a;pair=a", 0, ok, []string{"ok/4/5", "ok/3/5"}},
			{0, "ext", "pair=a;pair=a", 0, ok, []string{"ok/2/5", "ok/1/5"}},
			// Two units do not fit in the one left, all or nothing.
			{0, "ext", "pair=a;pair=a", 0, over, []string{"over/0/5", "over/0/5"}},
			{0, "ext", "pair=a", 0, ok, []string{"ok/0/5"}},
		}},
		{"sliding window is exact across the edge", []step{
			{50 * time.Second, "ext", "sliding=1", 0, ok, []string{"ok/1/2"}},
			{50 * time.Second, "ext", "sliding=1", 0, ok, []string{"ok/0/2"}},
			{70 * time.Second, "ext", "sliding=1", 0, over, []string{"over/0/2"}},
		}},
		{"fixed_window: envoyproxy/ratelimit's windows", []step{
			{50 * time.Second, "ext", "fixed=1", 0, ok, []string{"ok/1/2"}},
			{50 * time.Second, "ext", "fixed=1", 0, ok, []string{"ok/0/2"}},
			{70 * time.Second, "ext", "fixed=1", 0, ok, []string{"ok/1/2"}},
			{70 * time.Second, "ext", "fixed=1", 0, ok, []string{"ok/0/2"}},
		}},
		{"lockout", []step{
			{0, "ext", "locked=1", 0, ok, []string{"ok/0/1"}},
			{0, "ext", "locked=1", 0, over, []string{"over/0/1"}},
			{30 * time.Second, "ext", "locked=1", 0, over, []string{"over/0/1"}},
			{61 * time.Second, "ext", "locked=1", 0, ok, []string{"ok/0/1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run(t, newHarness(t, Config{}), tc.steps)
		})
	}
}

// TestGlobalShadowMode: every limit is decided and counted when it
// admits, a status says OVER_LIMIT where it would deny, and the overall
// code is OK.
func TestGlobalShadowMode(t *testing.T) {
	t.Parallel()
	run(t, newHarness(t, Config{ShadowMode: true}), []step{
		{0, "ext", "pair=b", 0, ok, []string{"ok/0/1"}},
		{0, "ext", "pair=b", 0, ok, []string{"over/0/1"}},
		{0, "ext", "pair=a;pair=b", 0, ok, []string{"ok/4/5", "over/0/1"}},
		{0, "ext", "pair=a", 0, ok, []string{"ok/3/5"}},
		// A shadow_mode descriptor keeps its OK status.
		{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/2/3"}},
	})
}

func TestShouldRateLimitStatusFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.now.Store(int64(20 * time.Second))
	resp := h.call(t, "ext", "fixed=1", 0)
	st := resp.Statuses[0]
	if st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.RequestsPerUnit != 2 {
		t.Errorf("current_limit: got %v, want 2 per MINUTE", st.CurrentLimit)
	}
	if got := st.DurationUntilReset.AsDuration(); got != 40*time.Second {
		t.Errorf("duration_until_reset: got %v, want 40s (the fixed window's end)", got)
	}
	hdr := map[string]string{}
	for _, kv := range resp.ResponseHeadersToAdd {
		hdr[kv.Key] = kv.Value
	}
	want := map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40",
		"RateLimit-Policy": `"fixed";q=2;w=60`, "RateLimit": `"fixed";r=1;t=40`,
	}
	for k, v := range want {
		if hdr[k] != v {
			t.Errorf("header %s: got %q, want %q", k, hdr[k], v)
		}
	}
	if len(hdr) != len(want) {
		t.Errorf("headers: got %v, want %v", hdr, want)
	}
	// No headers for shadow limits or descriptors without one.
	if resp := h.call(t, "rl", "nothing=1", 0); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("no limit: got headers %v, want none", resp.ResponseHeadersToAdd)
	}
}

func TestHeaderModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode ratelimitheader.Mode
		want int
	}{{ratelimitheader.None, 0}, {ratelimitheader.Legacy, 3}, {ratelimitheader.Draft, 2}} {
		h := newHarness(t, Config{Headers: tc.mode})
		if got := len(h.call(t, "ext", "cost=1", 0).ResponseHeadersToAdd); got != tc.want {
			t.Errorf("%v: got %d headers, want %d", tc.mode, got, tc.want)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	many := strings.Repeat("a=1;", MaxDescriptors) + "a=1"
	long := "a=" + strings.Repeat("x", MaxKeyBytes)
	for _, tc := range []struct {
		name   string
		domain string
		spec   string
	}{
		{"empty domain", "", "a=1"},
		{"too many descriptors", "rl", many},
		{"too long", "rl", long},
	} {
		_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: tc.domain, Descriptors: descs(tc.spec)})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", tc.name, err)
		}
	}
	_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: got %v, want InvalidArgument", err)
	}
	// A bad override unit.
	d := descs("a=1")
	d[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99}
	if _, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: d}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad override: got %v, want InvalidArgument", err)
	}
}

func TestLimitOverride(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	for i, tc := range []struct {
		domain string
		want   rlsv3.RateLimitResponse_Code
	}{{"rl", ok}, {"rl", over}, {"nosuchdomain", ok}, {"nosuchdomain", ok}} {
		// The override applies to entries the config does not know; an
		// unknown domain is OK whatever the descriptor carries.
		d := descs("anything=1")
		d[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		resp, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: tc.domain, Descriptors: d})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != tc.want {
			t.Errorf("call %d (%s): got %v, want %v", i, tc.domain, resp.OverallCode, tc.want)
		}
	}
}

func TestMetricsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	for _, v := range []string{"a", "b", "c"} {
		h.call(t, "rl", "foo="+v, 0)
		h.call(t, "ext", "detailed="+v, 0)
		h.call(t, "caller-made-"+v, "foo="+v, 0)
	}
	h.call(t, "rl", "foo=s,baz=shady", 0)
	h.call(t, "rl", "foo=s,baz=shady", 0)
	h.call(t, "rl", "foo=s,baz=shady", 0)
	h.call(t, "rl", "foo=s,baz=shady", 0)
	const descriptors = "gateway_rls_descriptors_total"
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		what   string
	}{
		{descriptors, []string{"domain", "rl", "descriptor", "foo", "outcome", "ok"}, 3, "foo's values share one series"},
		{descriptors, []string{"domain", "ext", "descriptor", "detailed_b", "outcome", "ok"}, 1, "detailed_metric has a series per value"},
		{"gateway_rls_requests_total", []string{"domain", unknownDomain, "code", "ok"}, 3, "unknown domains share one series"},
		{descriptors, []string{"domain", "rl", "descriptor", "foo.baz_shady", "outcome", "shadow_over_limit"}, 1, "shadow denial"},
		{"gateway_rls_hits_total", []string{"domain", "rl", "descriptor", "foo"}, 3, "hits"},
	} {
		if got := metricValue(t, h.reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.what, got, tc.want)
		}
	}
	if n, err := testutil.GatherAndCount(h.reg, descriptors); err != nil || n != 6 {
		t.Errorf("descriptor series: got %d, want 6 (rl/foo, ext/detailed_a..c, rl/foo.baz_shady ok and shadow_over_limit)", n)
	}
}

// failing is a store that fails every call: fault injection for the fail
// modes (the Redis tests stop a real Redis).
type failing struct{}

func (failing) Allow(context.Context, time.Time, []limit.Request, []limit.Result) (bool, error) {
	return false, errors.New("store down")
}

func TestFailModes(t *testing.T) {
	t.Parallel()
	mem := func() limit.Store {
		m, err := limit.NewMemory(limit.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"open admits", Config{FailMode: failmode.Open}, []step{
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
			{0, "ext", "pair=b", 0, ok, []string{"ok/1/1"}},
		}},
		{"closed denies", Config{FailMode: failmode.Closed}, []step{
			{0, "ext", "pair=a", 0, over, []string{"over/0/5"}},
			{0, "rl", "nothing=1", 0, ok, []string{"ok/-/-"}},
		}},
		{"closed leaves shadow limits alone", Config{FailMode: failmode.Closed}, []step{
			{0, "rl", "foo=s,baz=shady", 0, ok, []string{"ok/0/3"}},
		}},
		{"local decides in memory with the share", Config{FailMode: failmode.Local, Local: mem(), LocalShare: 0.5}, []step{
			{0, "rl", "category=account", 0, ok, []string{"ok/1/4"}},
			{0, "rl", "category=account", 0, ok, []string{"ok/0/4"}},
			{0, "rl", "category=account", 0, over, []string{"over/0/4"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Store = failing{}
			h := newHarness(t, tc.cfg)
			run(t, h, tc.steps)
			if got := metricValue(t, h.reg, "gateway_rls_store_errors_total"); got == 0 {
				t.Errorf("store errors: got 0, want the failures counted")
			}
		})
	}
}

func TestHealthService(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", ServiceName} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: got %v, %v, want SERVING", svc, resp, err)
		}
	}
}

// metricValue returns the value of the counter or gauge name in reg
// whose labels are the name, value pairs of labels, 0 when there is none.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
