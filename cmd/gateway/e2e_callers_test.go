package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The example rules' partner-1 lists the digest of "demo-key".
func TestEndToEndCallers(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []http.Header
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	g := startGateway(t, []string{"GATEWAY_UNKNOWN_CALLERS=reject"}, "--upstream", up.URL, "--key-header", "X-Partner-Key", "--config", "configs/demo-rules.yaml")

	if code, body := send(t, "GET", g.proxy+"/v1/x", "X-App-Id", "partner-1"); code != 401 || !strings.Contains(body, `"error":"missing_api_key"`) {
		t.Errorf("partner-1 without a key: got %d %s", code, body)
	}
	if code, body := send(t, "GET", g.proxy+"/v1/x", "X-App-Id", "partner-1", "X-Partner-Key", "guess"); code != 401 || !strings.Contains(body, `"error":"invalid_api_key"`) {
		t.Errorf("partner-1 with a wrong key: got %d %s", code, body)
	}
	if code, body := send(t, "GET", g.proxy+"/v1/x", "X-App-Id", "partner-1", "X-Partner-Key", "demo-key"); code != 200 {
		t.Errorf("partner-1 with its key: got %d %s", code, body)
	}
	if code, body := send(t, "GET", g.proxy+"/v1/x"); code != 403 || !strings.Contains(body, `"error":"unknown_caller"`) {
		t.Errorf("a caller without an app ID: got %d %s", code, body)
	}
	if code, body := send(t, "GET", g.proxy+"/v1/user/1", "X-App-Id", "app-1"); code != 200 {
		t.Errorf("app-1: got %d %s", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", len(seen))
	}
	for _, h := range seen {
		if h.Get("X-App-Id") != "" || h.Get("X-Partner-Key") != "" {
			t.Errorf("the upstream saw the app header or the key: %v", h)
		}
	}
	// /rules counts the keys and never shows their digests.
	if _, rules := send(t, "GET", g.admin+"/rules"); !strings.Contains(rules, `"appId":"partner-1","by":"app","keys":1`) || strings.Contains(rules, "c48a01f4") {
		t.Errorf("/rules: want partner-1 with \"keys\":1 and no digest:\n%s", rules)
	}
	_, metrics := send(t, "GET", g.admin+"/metrics")
	for _, want := range []string{
		`gateway_requests_total{api="",app="partner-1",decision="unauthorized"} 2`,
		`gateway_requests_total{api="",app="*",decision="unauthorized"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
