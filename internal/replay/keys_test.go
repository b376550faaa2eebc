package replay

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth/jwttest"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
)

// keyedRules limit each user, each tenant, and each user from each
// address.
const keyedRules = `
configs:
  - appId: app-1
    limit: 150
    unit: 1m
    limits:
      - api: /v1/profile
        by: header:X-User-Id
        limit: 10
        unit: 1m
      - api: /v1/search
        by: query:tenant
        missing: share
        limit: 15
        unit: 1m
      - api: /v1/pair
        by: [ip, header:X-User-Id]
        limit: 6
        unit: 1m
`

// TestReplayKeyedRules records traffic of keyed rules with the access
// log (which logs hashes of the values, not the values) and replays it:
// every request is decided as the live gateway decided it.
func TestReplayKeyedRules(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	users := []string{"alice", "bob", "carol dan", "é|{x}", ""} // "": missing, counted by ip
	tenants := []string{"t1", "t2", "a&b=c", ""}
	paths := []string{"/v1/profile", "/v1/search", "/v1/pair"}
	ips := []string{"203.0.113.1", "203.0.113.2"}
	type req struct {
		at                 time.Time
		path, user, tenant string
		ip                 string
		live               observe.Decision
	}
	var reqs []req
	at := t0
	for range 2000 {
		at = at.Add(time.Duration(rng.IntN(600)) * time.Millisecond)
		reqs = append(reqs, req{at: at, path: paths[rng.IntN(len(paths))], user: users[rng.IntN(len(users))],
			tenant: tenants[rng.IntN(len(tenants))], ip: ips[rng.IntN(len(ips))]})
	}
	var logBuf bytes.Buffer
	g := newLiveGateway(t, keyedRules, &logBuf)
	limited := 0
	for i := range reqs {
		q := &reqs[i]
		g.now = q.at
		target := q.path
		if q.tenant != "" {
			target += "?tenant=" + strings.ReplaceAll(strings.ReplaceAll(q.tenant, "&", "%26"), "=", "%3D")
		}
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr = q.ip + ":4242"
		r.Header.Set("X-App-Id", "app-1")
		if q.user != "" {
			r.Header.Set("X-User-Id", q.user)
		}
		g.h.ServeHTTP(httptest.NewRecorder(), r)
		q.live = g.last
		if q.live == observe.DecisionLimited {
			limited++
		}
	}
	if limited < 200 || limited > len(reqs)-200 {
		t.Fatalf("the traffic should exercise the limits: %d of %d limited", limited, len(reqs))
	}
	if strings.Contains(logBuf.String(), "alice") || !strings.Contains(logBuf.String(), `"key_hash.header:X-User-Id":"`+observe.KeyHash("alice")+`"`) {
		t.Fatal("the access log should carry the users' hashes, not their IDs")
	}
	seen := 0
	replayBytes(t, Config{
		Candidate: compileRules(t, "keyed.yaml", keyedRules),
		OnRequest: func(rr Request) {
			seen++
			q := reqs[rr.Line-1]
			if rr.Candidate != q.live {
				t.Errorf("line %d (%s user %q tenant %q from %s at t0+%v): replay %s, live %s",
					rr.Line, q.path, q.user, q.tenant, q.ip, q.at.Sub(t0), rr.Candidate, q.live)
			}
		},
	}, logBuf.Bytes())
	if seen != len(reqs) {
		t.Errorf("replayed %d requests, want %d", seen, len(reqs))
	}
}

// TestReplayKeyLines checks how key fields are read: hashed or raw,
// escaped or not (the slow path), headers and query parameters.
func TestReplayKeyLines(t *testing.T) {
	t.Parallel()
	const head = `{"time":"2026-11-21T12:00:00Z","msg":"access","app_id":"app-1","method":"GET","path":"/v1/profile","client_ip":"203.0.113.1","decision":"allowed"`
	for _, tc := range []struct {
		name, fields string
		want         []keyValue
	}{
		{name: "none", fields: ``},
		{name: "hash", fields: `,"key_hash.header:X-User-Id":"0123456789abcdef"`, want: []keyValue{{name: "X-User-Id", val: "0123456789abcdef"}}},
		{name: "raw escaped", fields: `,"key.header:X-User-Id":"a\"b","key.query:tenant":"t1"`, want: []keyValue{{name: "X-User-Id", val: `a"b`}, {query: true, name: "tenant", val: "t1"}}},
		{name: "not a string", fields: `,"key.header:X-User-Id":7`},
		{name: "other fields", fields: `,"keyboard":"x","key_hashes":"y"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec replayRecord
			kind, err := newLineParser().parse([]byte(head+tc.fields+"}"), &rec)
			if kind != lineRecord || err != nil {
				t.Fatalf("parse: %v %v", kind, err)
			}
			got := map[string]keyValue{}
			for _, kv := range rec.keys {
				got[strconv.FormatBool(kv.query)+kv.name] = kv
			}
			if len(got) != len(tc.want) {
				t.Errorf("keys: got %+v, want %+v", rec.keys, tc.want)
			}
			for _, w := range tc.want {
				if g := got[strconv.FormatBool(w.query)+w.name]; g != w {
					t.Errorf("key %s: got %+v, want %+v", w.name, g, w)
				}
			}
		})
	}
}

// TestReplayClaimKeys records traffic of a rule keyed on a verified JWT
// claim (by: claim:sub) and replays it: the log holds the subjects'
// hashes, never the subjects or the tokens, and the replay, which has no
// token, decides every request as the live gateway did.
func TestReplayClaimKeys(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/me
        by: claim:sub
        limit: 4
        unit: 1m
`
	secret := []byte("a test secret of at least 32 bytes!")
	v, err := jwtauth.New(jwtauth.Config{HMACSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	g := newLiveGateway(t, rules, &logBuf, func(c *proxy.HandlerConfig) { c.JWT = v })
	subjects := []string{"alice", "bob", "carol|x", ""} // "": no token, counted by ip
	rng := rand.New(rand.NewPCG(5, 6))
	var live []observe.Decision
	at, limited := t0, 0
	for range 300 {
		at = at.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
		g.now = at
		r := httptest.NewRequest("GET", "/v1/me", nil)
		r.Header.Set("X-App-Id", "app-1")
		if sub := subjects[rng.IntN(len(subjects))]; sub != "" {
			r.Header.Set("Authorization", "Bearer "+jwttest.SignHS256(t, secret, jwttest.Claims(at, time.Hour, sub)))
		}
		g.h.ServeHTTP(httptest.NewRecorder(), r)
		live = append(live, g.last)
		if g.last == observe.DecisionLimited {
			limited++
		}
	}
	if limited < 30 || limited > 270 {
		t.Fatalf("the traffic should exercise the limit: %d of 300 limited", limited)
	}
	if strings.Contains(logBuf.String(), "alice") || strings.Contains(logBuf.String(), "eyJ") ||
		!strings.Contains(logBuf.String(), `"key_hash.claim:sub":"`+observe.KeyHash("alice")+`"`) {
		t.Fatalf("the access log should carry the subjects' hashes, never the subjects or tokens:\n%.600s", logBuf.String())
	}
	seen := 0
	replayBytes(t, Config{
		Candidate: compileRules(t, "claims.yaml", rules),
		OnRequest: func(rr Request) {
			seen++
			if want := live[rr.Line-1]; rr.Candidate != want {
				t.Errorf("line %d: replay %s, live %s", rr.Line, rr.Candidate, want)
			}
		},
	}, logBuf.Bytes())
	if seen != len(live) {
		t.Errorf("replayed %d of %d requests", seen, len(live))
	}
}

// TestReplayBodyKeys records traffic of rules keyed on fields of the JSON
// body (by: body:model, body:params.name) and replays it: the log holds
// the values' hashes, and the replay, which has no body, decides every
// request as the live gateway did from a body it builds of them.
func TestReplayBodyKeys(t *testing.T) {
	t.Parallel()
	const rules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/chat/completions
        by: body:model
        missing: share
        limit: 4
        unit: 1m
      - api: /mcp
        by: [ip, body:params.name]
        limit: 3
        unit: 1m
`
	var logBuf bytes.Buffer
	g := newLiveGateway(t, rules, &logBuf)
	models := []string{`"gpt-4o"`, `"o3"`, `"a|{b}"`, `7`, ``} // "": no model, shared
	tools := []string{"search", "fetch", ""}                   // "": counted by ip
	rng := rand.New(rand.NewPCG(7, 8))
	var live []observe.Decision
	at, limited := t0, 0
	for range 600 {
		at = at.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		g.now = at
		var r *http.Request
		if rng.IntN(2) == 0 {
			body := `{"messages":[]}`
			if m := models[rng.IntN(len(models))]; m != "" {
				body = `{"model":` + m + `,"messages":[]}`
			}
			r = httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		} else {
			body := `{"method":"tools/call","params":{}}`
			if n := tools[rng.IntN(len(tools))]; n != "" {
				body = `{"method":"tools/call","params":{"name":"` + n + `"}}`
			}
			r = httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
			r.RemoteAddr = []string{"203.0.113.1", "203.0.113.2"}[rng.IntN(2)] + ":4242"
		}
		r.Header.Set("X-App-Id", "app-1")
		g.h.ServeHTTP(httptest.NewRecorder(), r)
		live = append(live, g.last)
		if g.last == observe.DecisionLimited {
			limited++
		}
	}
	if limited < 60 || limited > 540 {
		t.Fatalf("the traffic should exercise the limits: %d of 600 limited", limited)
	}
	if !strings.Contains(logBuf.String(), `"key_hash.body:model":"`+observe.KeyHash("gpt-4o")+`"`) {
		t.Fatalf("the access log should carry the models' hashes:\n%.600s", logBuf.String())
	}
	seen := 0
	replayBytes(t, Config{
		Candidate: compileRules(t, "body.yaml", rules),
		OnRequest: func(rr Request) {
			seen++
			if want := live[rr.Line-1]; rr.Candidate != want {
				t.Errorf("line %d: replay %s, live %s", rr.Line, rr.Candidate, want)
			}
		},
	}, logBuf.Bytes())
	if seen != len(live) {
		t.Errorf("replayed %d requests, want %d", seen, len(live))
	}
}
