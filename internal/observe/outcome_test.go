package observe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// TestOutcomeKeys checks that an outcome keeps every key value it is
// given, in order, past the values it holds without allocating, and that
// a reused outcome starts empty.
func TestOutcomeKeys(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 4, 5, 9} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			var o Outcome
			var want []KeyValue
			for i := range n {
				kv := KeyValue{Part: config.KeyPart{Kind: config.KeyHeader, Name: fmt.Sprintf("X-Part-%d", i)}, Value: fmt.Sprint(i)}
				o.AddKey(kv)
				want = append(want, kv)
			}
			got := o.Keys()
			if len(got) != n {
				t.Fatalf("keys: got %d, want %d", len(got), n)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("key %d: got %v, want %v", i, got[i], want[i])
				}
				if kv, ok := o.Key(want[i].Part); !ok || kv != want[i] {
					t.Errorf("Key(%v): got %v %v, want %v", want[i].Part, kv, ok, want[i])
				}
			}
			if _, ok := o.Key(config.KeyPart{Kind: config.KeyQuery, Name: "X-Part-0"}); ok {
				t.Error("Key found a part never added")
			}
			o = Outcome{}
			if len(o.Keys()) != 0 {
				t.Errorf("a reset outcome has keys %v", o.Keys())
			}
		})
	}
}

// TestAccessLogWritesTheOutcomesKeys checks that the access log writes
// the key values of the outcome, each once, and leaves out the empty and
// the unusable ones: it has nothing else to read them from.
func TestAccessLogWritesTheOutcomesKeys(t *testing.T) {
	t.Parallel()
	user := config.KeyPart{Kind: config.KeyHeader, Name: "X-User-Id"}
	tenant := config.KeyPart{Kind: config.KeyQuery, Name: "tenant"}
	sub := config.KeyPart{Kind: config.KeyClaim, Name: "sub"}
	o := &Outcome{Method: "POST", Start: t0}
	o.AddLimit(LimitOutcome{App: "app-1", API: "/", By: "header:X-User-Id,query:tenant,claim:sub", Allowed: true})
	o.AddKey(KeyValue{Part: user, Value: "alice"})
	o.AddKey(KeyValue{Part: tenant, Value: ""})
	o.AddKey(KeyValue{Part: sub, Value: "x", Bad: "is not a string"})
	var buf bytes.Buffer
	NewAccessLog(&buf, nil).ObserveRequest(o)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if got := rec["key_hash.header:X-User-Id"]; got != KeyHash("alice") {
		t.Errorf("header: got %v, want %s", got, KeyHash("alice"))
	}
	for _, f := range []string{"key_hash.query:tenant", "key_hash.claim:sub"} {
		if v, ok := rec[f]; ok {
			t.Errorf("%s: got %v, want no field", f, v)
		}
	}
	if got := rec["method"]; got != "POST" {
		t.Errorf("method: got %v, want POST", got)
	}
}
