package proxy

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf gwtest.Log
	al := observe.NewAccessLog(&buf, nil)
	g := newGW(t, basicRules, func(h *HandlerConfig, _ *UpstreamConfig) {
		h.Observers = append(h.Observers, al)
	})
	send := func(target, app string) {
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr = "198.51.100.7:5555"
		if app != "" {
			r.Header.Set("X-App-Id", app)
		}
		g.h.ServeHTTP(httptest.NewRecorder(), r)
	}
	send("/v1//user/42?x=1", "app-2")
	send("/v1/user", "app-2")
	g.clock.Set(t0.Add(1500 * time.Millisecond))
	send("/v1/user", "app-2")
	send("/anything", "no-such-app")

	type line struct {
		Time             time.Time
		Msg              string
		App              string
		AppID            string `json:"app_id"`
		Rule             string
		Method, Path     string
		ClientIP         string `json:"client_ip"`
		Decision         string
		Status           int
		Duration         float64
		UpstreamDuration *float64 `json:"upstream_duration"`
	}
	var lines []line
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %s", sc.Text())
		}
		lines = append(lines, l)
	}
	if len(lines) != 4 {
		t.Fatalf("lines: got %d, want 4", len(lines))
	}
	want := []line{
		{Time: t0, Msg: "access", App: "app-2", AppID: "app-2", Rule: "/v1/user", Method: "GET", Path: "/v1/user/42", ClientIP: "198.51.100.7", Decision: "allowed", Status: 200},
		{Time: t0, Msg: "access", App: "app-2", AppID: "app-2", Rule: "/v1/user", Method: "GET", Path: "/v1/user", ClientIP: "198.51.100.7", Decision: "allowed", Status: 200},
		{Time: t0.Add(1500 * time.Millisecond), Msg: "access", App: "app-2", AppID: "app-2", Rule: "/v1/user", Method: "GET", Path: "/v1/user", ClientIP: "198.51.100.7", Decision: "limited", Status: 429},
		{Time: t0.Add(1500 * time.Millisecond), Msg: "access", App: "*", AppID: "no-such-app", Rule: "/", Method: "GET", Path: "/anything", ClientIP: "198.51.100.7", Decision: "allowed", Status: 200},
	}
	for i, w := range want {
		got := lines[i]
		if got.UpstreamDuration == nil {
			t.Errorf("line %d: no upstream_duration", i)
		}
		got.UpstreamDuration, got.Duration = nil, 0
		if !got.Time.Equal(w.Time) {
			t.Errorf("line %d time: got %v, want %v", i, got.Time, w.Time)
		}
		got.Time = w.Time
		if got != w {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
}
