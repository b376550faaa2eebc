package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Fixed keys hashed at compile time decide exactly as unhashed ones, with
// the store's own hash or with another store's (a hint that is wrong
// costs a second hash, never a second counter).
func TestCompiledKeyHashes(t *testing.T) {
	t.Parallel()
	parsed, err := config.Parse("rules.yaml", []byte(basicRules))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := limit.NewMemory(limit.MemoryConfig{})
	for _, tt := range []struct {
		name string
		hash func(*limit.Memory) func(string) uint64
	}{
		{"none", func(*limit.Memory) func(string) uint64 { return nil }},
		{"the store's", func(m *limit.Memory) func(string) uint64 { return m.Hash }},
		{"another store's", func(*limit.Memory) func(string) uint64 { return other.Hash }},
	} {
		store, _ := limit.NewMemory(limit.MemoryConfig{})
		rs, err := CompileWith(parsed, t0, CompileOptions{Hash: tt.hash(store)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHandler(HandlerConfig{Rules: rs, Store: store, Now: func() time.Time { return t0 },
			Upstream: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 10 {
			r := httptest.NewRequest("GET", "/v1/user/1", nil)
			r.Header.Set("X-App-Id", "app-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code == http.StatusOK {
				admitted++
			}
		}
		// /v1/user allows 3 in 10s.
		if admitted != 3 || store.Len() != 2 {
			t.Errorf("hash %s: admitted %d of 10, %d keys; want 3 and 2 (the app total and the rule)", tt.name, admitted, store.Len())
		}
	}
}
