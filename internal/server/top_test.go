package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// topRules limit app-1's /v1/profile per user.
const topRules = `configs:
  - appId: app-1
    limits:
      - api: /v1/profile
        by: header:X-User-Id
        limit: 3
        unit: 1m
`

// TestTopEndpoint runs a gateway, sends requests of two users, and reads
// GET /top on the admin port: the heavier user first, with its admitted
// and limited requests, and the header value hashed as the access log
// writes it (under the secret kept beside the access log), or as it is
// with --top-keys.
func TestTopEndpoint(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		t.Run(map[bool]string{false: "hashed", true: "raw"}[raw], func(t *testing.T) {
			t.Parallel()
			testTopEndpoint(t, raw)
		})
	}
}

func testTopEndpoint(t *testing.T, raw bool) {
	accessLog := filepath.Join(t.TempDir(), "access.log")
	g := startLive(t, func(c *Config) {
		if err := os.WriteFile(c.ConfigPath, []byte(topRules), 0o644); err != nil {
			t.Fatal(err)
		}
		c.AccessLog, c.TopKeys = accessLog, raw
	})
	send := func(user string, n int) {
		for range n {
			req, _ := http.NewRequest("GET", "http://"+g.proxy+"/v1/profile", nil)
			req.Header.Set("X-App-Id", "app-1")
			req.Header.Set("X-User-Id", user)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	send("user 42/é", 5)
	send("user-7", 1)
	var got topView
	read := func(query string) {
		t.Helper()
		resp, err := http.Get("http://" + g.admin + "/top" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /top: got %d, want 200", resp.StatusCode)
		}
		got = topView{}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
	}
	// The outcome is observed as the response completes: wait for the
	// last one.
	eventually.True(t, 30*time.Second, func() bool {
		read("")
		return len(got.Limits) == 1 && got.Limits[0].Requests == 6
	}, "GET /top never counted the 6 requests: %+v", &got)
	l := got.Limits[0]
	if l.App != "app-1" || l.API != "/v1/profile" || l.By != "header:X-User-Id" || got.K != observe.DefaultTopK {
		t.Errorf("limit: got %s %s by %s (k %d), want app-1 /v1/profile by header:X-User-Id (k %d)", l.App, l.API, l.By, got.K, observe.DefaultTopK)
	}
	if len(l.Keys) != 2 {
		t.Fatalf("keys: got %+v, want 2", l.Keys)
	}
	// The hash is the access log's: under the secret the gateway kept
	// beside it, and not the plain sha256 anyone could recompute.
	secret, created, err := observe.LoadKeyHashSecret(accessLog + ".key")
	if err != nil || created {
		t.Fatalf("the key-hash secret beside the access log: created %v, %v", created, err)
	}
	h := observe.NewKeyHasher(secret)
	shown := func(v string) string {
		if raw {
			return v
		}
		return h.Hash(v)
	}
	for i, want := range []struct {
		key               string
		admitted, limited int64
	}{{shown("user 42/é"), 3, 2}, {shown("user-7"), 1, 0}} {
		k := l.Keys[i]
		if k.Key != want.key || k.Admitted != want.admitted || k.Limited != want.limited || k.Count != want.admitted+want.limited || k.Error != 0 {
			t.Errorf("key %d: got %+v, want %q admitted %d limited %d", i, k, want.key, want.admitted, want.limited)
		}
	}
	if !raw {
		if k := l.Keys[1].Key; k == observe.KeyHash("user-7") || strings.Contains(k, "user") {
			t.Errorf("key %q: want a keyed hash, not the value or its unkeyed hash", k)
		}
		// The access log observes a request after /top does.
		want := `"key_hash.header:X-User-Id":"` + h.Hash("user-7") + `"`
		eventually.True(t, 30*time.Second, func() bool {
			log, _ := os.ReadFile(accessLog)
			return strings.Contains(string(log), want)
		}, "access log lacks %s, the hash /top shows", want)
	}
	read("?app=app-2")
	if len(got.Limits) != 0 {
		t.Errorf("?app=app-2: got %+v, want no limits", got.Limits)
	}
}
