package rls

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestTop(t *testing.T) {
	t.Parallel()
	top := NewTop(observe.TopConfig{K: 3, Period: time.Minute, RawKeys: true})
	h := newHarness(t, Config{Observers: []Observer{top}})
	// sliding allows 2 a minute per value: heavy is admitted twice and
	// denied 8 times, mid twice and 4 times.
	for range 10 {
		h.call(t, "ext", "sliding=heavy", 0)
	}
	for range 6 {
		h.call(t, "ext", "sliding=mid", 0)
	}
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		h.call(t, "ext", "sliding="+v, 0)
	}
	// Not listed: one counter (pair=b), an unknown domain, a descriptor
	// without a limit. detailed_metric is listed under its path.
	h.call(t, "ext", "pair=b", 0)
	h.call(t, "caller-made", "sliding=heavy", 0)
	h.call(t, "ext", "nothing=here", 0)
	h.call(t, "ext", "detailed=x", 0)
	// A limit override from Envoy is listed under (override), in a known
	// domain only.
	for _, domain := range []string{"ext", "caller-made"} {
		d := descs("anything=1")
		d[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		if _, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: d}); err != nil {
			t.Fatal(err)
		}
	}

	got := top.Snapshot(t0, "")
	if len(got) != 3 || got[0].API != overrideLabel || got[1].API != "detailed" || got[2].API != "sliding" {
		t.Fatalf("limits: got %+v, want ext's (override), detailed and sliding", got)
	}
	if o := got[0].Keys; len(o) != 1 || o[0].Key != "anything=1" {
		t.Errorf("override keys: got %+v, want anything=1", o)
	}
	s := got[2]
	if s.App != "ext" || s.By != TopBy || s.Requests != 21 || !s.From.Equal(t0) {
		t.Errorf("sliding: got %s %s requests %d from %v, want ext descriptor 21 from %v", s.App, s.By, s.Requests, s.From, t0)
	}
	if len(s.Keys) != 3 {
		t.Fatalf("sliding keys: got %d (%+v), want K = 3", len(s.Keys), s.Keys)
	}
	for i, want := range []observe.TopKey{
		{Key: "sliding=heavy", Count: 10, Admitted: 2, Limited: 8},
		{Key: "sliding=mid", Count: 6, Admitted: 2, Limited: 4},
	} {
		if s.Keys[i] != want {
			t.Errorf("key %d: got %+v, want %+v", i, s.Keys[i], want)
		}
	}
	if d := got[1].Keys; len(d) != 1 || d[0].Key != "detailed=x" {
		t.Errorf("detailed keys: got %+v, want detailed=x", d)
	}
	if got := top.Snapshot(t0, "rl"); len(got) != 0 {
		t.Errorf("domain rl: got %+v, want nothing", got)
	}
	// Two periods later the window is empty and forgets the limits.
	if got := top.Snapshot(t0.Add(2*time.Minute+time.Second), ""); len(got) != 0 {
		t.Errorf("two periods later: got %+v, want nothing", got)
	}
}

// logLines returns the JSON lines of l.
func logLines(t *testing.T, l *gwtest.Log) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the log: %v", err)
	}
	return out
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		var buf gwtest.Log
		al := observe.NewAccessLog(&buf, nil)
		al.SetRawKeys(raw)
		h := newHarness(t, Config{Observers: []Observer{NewAccessLog(al)}})
		h.now.Store(int64(1500 * time.Millisecond))
		// 3 hits exceed sliding's 2: denied, nothing counted, reset at
		// the window's end (59 s after 1.5 s); pair=b is only checked
		// (its hits_addend is 0).
		h.call(t, "ext", "sliding=u1;pair=b+0;nothing=here", 3)
		h.call(t, "ext", "sliding=u1", 0)
		_, err := h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ext"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("empty descriptors: got %v, want InvalidArgument", err)
		}

		// A refused call's values, however long, make a bounded line.
		huge := strings.Repeat("x", 512<<10)
		_, err = h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ext", Descriptors: descs("sliding=" + huge)})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a 512 KiB value: got %v, want InvalidArgument", err)
		}

		lines := logLines(t, &buf)
		if len(lines) != 4 {
			t.Fatalf("raw %v: got %d lines, want 4 (one per call):\n%v", raw, len(lines), lines)
		}
		if b, _ := json.Marshal(lines[3]); len(b) > 2*MaxKeyBytes {
			t.Errorf("raw %v: the line of a 512 KiB value is %d bytes, want at most %d", raw, len(b), 2*MaxKeyBytes)
		}
		u1 := observe.KeyHash("u1")
		if raw {
			u1 = "u1"
		}
		first, _ := json.Marshal(lines[0]["descriptors"])
		wantDescs := `[{"code":"OVER_LIMIT","entries":[["sliding","` + u1 + `"]],"limit":"2/minute","remaining":0,"reset":59},` +
			`{"code":"OK","entries":[["pair","` + map[bool]string{false: observe.KeyHash("b"), true: "b"}[raw] + `"]],"hits_addend":0,"limit":"1/minute","remaining":1},` +
			`{"code":"OK","entries":[["nothing","` + map[bool]string{false: observe.KeyHash("here"), true: "here"}[raw] + `"]],"remaining":0}]`
		if string(first) != wantDescs {
			t.Errorf("raw %v: descriptors:\n got %s\nwant %s", raw, first, wantDescs)
		}
		for i, want := range []struct{ code, hits string }{{"OVER_LIMIT", "3"}, {"OK", "0"}, {"InvalidArgument", "0"}} {
			l := lines[i]
			if l["time"] != "2026-11-26T08:00:01.5Z" || l["msg"] != "rls" || l["domain"] != "ext" || l["code"] != want.code || jsonString(l["hits_addend"]) != want.hits {
				t.Errorf("raw %v line %d: got %v, want time 08:00:01.5, domain ext, code %s, hits_addend %s", raw, i, l, want.code, want.hits)
			}
			if p, _ := l["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("raw %v line %d: peer %q, want the client's loopback address", raw, i, p)
			}
			if _, ok := l["duration"].(float64); !ok {
				t.Errorf("raw %v line %d: no duration: %v", raw, i, l)
			}
		}
		if l := lines[2]; l["error"] != "rate limit descriptor list must not be empty" {
			t.Errorf("raw %v: refused call's error: got %v", raw, l["error"])
		}
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
