package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	current := basicRules
	rules := NewRules(g.h, func() (*config.Rules, error) {
		return config.Parse("rules.yaml", []byte(current))
	}, g.clock.now, g.h.log)
	var reloads []bool
	rules.OnReload(func(ok bool, _ *RuleSet) { reloads = append(reloads, ok) })
	admin := NewAdmin(AdminConfig{Rules: rules})
	get := func(method, path string) (int, map[string]any) {
		w := httptest.NewRecorder()
		admin.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %s", method, path, w.Body)
		}
		return w.Code, body
	}

	if code, body := get("GET", "/healthz"); code != 200 || body["status"] != "ok" {
		t.Errorf("/healthz: got %d %v", code, body)
	}
	if code, _ := get("GET", "/readyz"); code != 200 {
		t.Errorf("/readyz: got %d", code)
	}
	code, body := get("GET", "/rules")
	if code != 200 {
		t.Fatalf("/rules: got %d", code)
	}
	sha := g.h.Rules().Source.SHA256
	if body["sha256"] != sha || len(sha) != 64 {
		t.Errorf("/rules sha256: got %v, want %s", body["sha256"], sha)
	}
	if _, ok := body["lastError"]; ok {
		t.Errorf("/rules: lastError present before any failure: %v", body["lastError"])
	}
	apps := body["apps"].([]any)
	if len(apps) != 3 || apps[0].(map[string]any)["appId"] != "app-1" {
		t.Errorf("/rules apps: got %v", apps)
	}

	// A bad reload keeps the rules and reports the error.
	current = "configs: [oops"
	if code, body := get("POST", "/rules/reload"); code != http.StatusUnprocessableEntity || body["error"] != "reload_failed" {
		t.Errorf("bad reload: got %d %v", code, body)
	}
	_, body = get("GET", "/rules")
	if body["sha256"] != sha || !strings.Contains(body["lastError"].(string), "rules.yaml") || body["lastErrorAt"] == nil {
		t.Errorf("/rules after bad reload: got sha %v lastError %v at %v", body["sha256"], body["lastError"], body["lastErrorAt"])
	}
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 200 {
		t.Errorf("request after bad reload: got %d, want 200", w.Code)
	}

	// A good reload swaps the rules and clears the error.
	current = "configs:\n  - appId: app-2\n    limits:\n      - api: /v1/user\n        limit: 0\n"
	if code, _ := get("POST", "/rules/reload"); code != 200 {
		t.Errorf("good reload: got %d", code)
	}
	_, body = get("GET", "/rules")
	if body["sha256"] == sha || body["lastError"] != nil {
		t.Errorf("/rules after good reload: got sha %v lastError %v", body["sha256"], body["lastError"])
	}
	if w := g.do("GET", "/v1/user", "app-2"); w.Code != 429 {
		t.Errorf("request after good reload: got %d, want 429", w.Code)
	}
	if got, want := len(reloads), 2; got != want || reloads[0] || !reloads[1] {
		t.Errorf("reload hook calls: got %v, want [false true]", reloads)
	}
}

func TestReadyzReportsStoreTrouble(t *testing.T) {
	t.Parallel()
	g := newGW(t, basicRules)
	admin := NewAdmin(AdminConfig{
		Rules: NewRules(g.h, nil, nil, nil),
		Ready: func() error { return errors.New("store unreachable") },
	})
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 503 || !strings.Contains(w.Body.String(), "store unreachable") {
		t.Errorf("got %d %s, want 503 with the reason", w.Code, w.Body)
	}
}
