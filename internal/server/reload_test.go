package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/watch"
)

// rulesWithLimit is a rule file giving app-1 `limit` requests a minute on
// /v1/user; extra adds more rules.
func rulesWithLimit(limit int, extra string) string {
	return fmt.Sprintf(`configs:
  - appId: app-1
    limits:
      - api: /v1/user
        limit: %d
        unit: 60
%s`, limit, extra)
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// watched is a gateway whose rules come from a real file, reloaded by the
// real watcher.
type watched struct {
	*gw
	rules   *Reloader
	path    string
	reloads chan bool
}

// newWatched starts a gateway on the rule file at path (already written)
// and watches it.
func newWatched(t *testing.T, path string) *watched {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := newGW(t, string(data))
	rules := g.reloader(func() (*config.Rules, error) { return config.Load(path) })
	w := &watched{gw: g, rules: rules, path: path, reloads: make(chan bool, 100)}
	rules.onReload = func(ok bool, _ *ruleset.Set) { w.reloads <- ok }
	fw, err := watch.New(watch.Config{Path: path, OnChange: func() { rules.Reload() }, Debounce: 10 * time.Millisecond, Settle: testSettle})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go fw.Run(ctx)
	t.Cleanup(func() { cancel(); fw.Close() })
	return w
}

// waitRules waits for the reload that brings the rules with sha256 want
// into force.
func (w *watched) waitRules(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for w.h.Rules().Source.SHA256 != want {
		select {
		case <-w.reloads:
		case <-deadline:
			t.Fatalf("rules %s.. never came into force; in force: %s.., last error %q", want[:8], w.h.Rules().Source.SHA256[:8], w.rules.view().LastError)
		}
	}
}

// waitFailure waits for a failed reload.
func (w *watched) waitFailure(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ok := <-w.reloads:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("no failed reload was seen")
		}
	}
}

// limitInForce measures app-1's /v1/user limit through the handler: it
// moves the clock an hour on (fresh windows) and counts admissions.
func (w *watched) limitInForce(t *testing.T) int {
	t.Helper()
	w.clock.Set(w.clock.Now().Add(time.Hour))
	for n := 0; n < 100; n++ {
		switch code := w.do("GET", "/v1/user", "app-1").Code; code {
		case 200:
		case 429:
			return n
		default:
			t.Fatalf("request %d: got %d", n, code)
		}
	}
	return -1
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReloadOnFileChanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// edit changes the file at path to content.
		edit func(t *testing.T, dir, path, content string)
	}{
		{name: "in-place write", edit: func(t *testing.T, _, path, content string) {
			writeFile(t, path, content)
		}},
		{name: "write temp then rename", edit: func(t *testing.T, dir, path, content string) {
			tmp := filepath.Join(dir, ".rules.yaml.tmp")
			writeFile(t, tmp, content)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "delete then re-create", edit: func(t *testing.T, _, path, content string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, content)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "rules.yaml")
			writeFile(t, path, rulesWithLimit(2, ""))
			w := newWatched(t, path)
			if got := w.limitInForce(t); got != 2 {
				t.Fatalf("initial limit: got %d, want 2", got)
			}
			for _, n := range []int{5, 3} {
				content := rulesWithLimit(n, "")
				tt.edit(t, dir, path, content)
				w.waitRules(t, sha(content))
				if got := w.limitInForce(t); got != n {
					t.Errorf("after edit to %d: limit in force %d", n, got)
				}
			}
		})
	}
}

func TestReloadKubernetesConfigMapSwap(t *testing.T) {
	t.Parallel()
	// The kubelet's atomic writer: the file is a symlink through "..data",
	// itself a symlink to a timestamped directory that is replaced whole.
	dir := t.TempDir()
	writeVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "rules.yaml"), content)
	}
	writeVersion("..2026_11_21_1", rulesWithLimit(2, ""))
	if err := os.Symlink("..2026_11_21_1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink("..data/rules.yaml", path); err != nil {
		t.Fatal(err)
	}
	w := newWatched(t, path)
	if got := w.limitInForce(t); got != 2 {
		t.Fatalf("initial limit: got %d, want 2", got)
	}
	prev := "..2026_11_21_1"
	for i, n := range []int{4, 7} {
		next := fmt.Sprintf("..2026_11_21_%d", i+2)
		content := rulesWithLimit(n, "")
		writeVersion(next, content)
		if err := os.Symlink(next, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, prev)); err != nil {
			t.Fatal(err)
		}
		prev = next
		w.waitRules(t, sha(content))
		if got := w.limitInForce(t); got != n {
			t.Errorf("after swap %d: limit in force %d, want %d", i+1, got, n)
		}
	}
}

func TestBadEditKeepsGoodRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	good := rulesWithLimit(3, "")
	writeFile(t, path, good)
	w := newWatched(t, path)

	bad := []struct{ name, content string }{
		{"invalid YAML", "configs:\n  - appId: [app-1\n"},
		{"validation error", rulesWithLimit(-7, "")},
		{"empty file", ""},
	}
	for _, b := range bad {
		writeFile(t, path, b.content)
		w.waitFailure(t)
		if got := w.limitInForce(t); got != 3 {
			t.Errorf("after %s: limit in force %d, want the previous 3", b.name, got)
		}
		v := w.rules.view()
		if v.SHA256 != sha(good) || v.LastError == "" || v.LastErrorAt == nil {
			t.Errorf("after %s: /rules sha %s.. lastError %q, want the good rules and an error", b.name, v.SHA256[:8], v.LastError)
		}
		if !strings.Contains(v.LastError, path) {
			t.Errorf("after %s: lastError %q does not name the file", b.name, v.LastError)
		}
		if b.name == "validation error" && !strings.Contains(v.LastError, "rules.yaml:5:") {
			t.Errorf("a validation error names the line: got %q", v.LastError)
		}
	}

	// A deleted file is a failure too, and the rules stay.
	os.Remove(path)
	w.waitFailure(t)
	if got := w.limitInForce(t); got != 3 {
		t.Errorf("after delete: limit in force %d, want 3", got)
	}

	// A later good edit recovers and clears the error.
	fixed := rulesWithLimit(6, "")
	writeFile(t, path, fixed)
	w.waitRules(t, sha(fixed))
	if got := w.limitInForce(t); got != 6 {
		t.Errorf("after the fix: limit in force %d, want 6", got)
	}
	if v := w.rules.view(); v.LastError != "" {
		t.Errorf("after the fix: lastError %q, want none", v.LastError)
	}
}

// reloadTo writes content and reloads synchronously, as SIGHUP does.
func reloadTo(t *testing.T, r *Reloader, path, content string) (bool, error) {
	t.Helper()
	writeFile(t, path, content)
	return r.Reload()
}

func TestCountersSurviveReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	other := "      - api: /v1/order\n        limit: 9\n"
	writeFile(t, path, rulesWithLimit(5, other))
	g := newGW(t, rulesWithLimit(5, other))
	rules := g.reloader(func() (*config.Rules, error) { return config.Load(path) })
	store := g.store
	spend := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if code := g.do("GET", "/v1/user", "app-1").Code; code != 200 {
				t.Fatalf("spending request %d: got %d", i, code)
			}
		}
	}
	remaining := func() string { return g.do("HEAD", "/v1/user", "app-1").Header().Get("X-RateLimit-Remaining") }

	spend(3)
	// An unrelated rule changes: the spent part stays spent (3 of 5,
	// then this probe: 1 left).
	if _, err := reloadTo(t, rules, path, rulesWithLimit(5, "      - api: /v1/order\n        limit: 10\n")); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != "1" {
		t.Errorf("after an unrelated change: remaining %s, want 1", got)
	}
	// Only the limit changes: the counts stay and the new limit applies
	// at once (4 spent of 6).
	if _, err := reloadTo(t, rules, path, rulesWithLimit(6, "")); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != "1" {
		t.Errorf("after raising the limit to 6: remaining %s, want 1", got)
	}
	if _, err := reloadTo(t, rules, path, rulesWithLimit(3, "")); err != nil {
		t.Fatal(err)
	}
	if code := g.do("GET", "/v1/user", "app-1").Code; code != 429 {
		t.Errorf("after lowering the limit below the count: got %d, want 429", code)
	}
	// The same file again changes nothing.
	if changed, err := rules.Reload(); changed || err != nil {
		t.Errorf("reload of the same file: changed %v err %v, want false nil", changed, err)
	}
	// The unit changes: a new counter shape, so the count starts over.
	if _, err := reloadTo(t, rules, path, strings.Replace(rulesWithLimit(3, ""), "unit: 60", "unit: 30", 1)); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != "2" {
		t.Errorf("after a unit change: remaining %s, want 2", got)
	}
	// A rule removed and restored within its grace period keeps its
	// count: the edit that removed it was a mistake.
	unit30 := strings.Replace(rulesWithLimit(3, ""), "unit: 60", "unit: 30", 1)
	gone := "configs:\n  - appId: app-2\n    limits:\n      - api: /\n        limit: 1\n"
	before := store.Len()
	if _, err := reloadTo(t, rules, path, gone); err != nil {
		t.Fatal(err)
	}
	if got := store.Len(); got != before || before == 0 {
		t.Errorf("keys just after removing app-1's rules: got %d, want all %d kept for the grace period", got, before)
	}
	g.clock.Set(g.clock.Now().Add(30 * time.Second))
	if _, err := reloadTo(t, rules, path, unit30); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != "1" {
		t.Errorf("restored 30s after its removal: remaining %s, want 1 (the count kept)", got)
	}
	// Removed for good: released once the grace period (a minute, the
	// longer of that and the unit) is over.
	if _, err := reloadTo(t, rules, path, gone); err != nil {
		t.Fatal(err)
	}
	g.clock.Set(g.clock.Now().Add(59 * time.Second))
	rules.Sweep()
	if got := store.Len(); got == 0 {
		t.Errorf("keys 59s after the removal: got none, want them kept for the grace period")
	}
	g.clock.Set(g.clock.Now().Add(time.Second))
	rules.Sweep()
	if got := store.Len(); got != 0 {
		t.Errorf("keys a minute after removing app-1's rules: got %d, want 0", got)
	}
}

func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, rulesWithLimit(1000, ""))
	g := newGW(t, rulesWithLimit(1000, ""))
	rules := g.reloader(func() (*config.Rules, error) { return config.Load(path) })

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		bad      atomic.Int64
		served   atomic.Int64
		badCodes sync.Map
	)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			paths := []string{"/v1/user", "/v1/user/42", "/v1/order", "/other"}
			for n := 0; !stop.Load(); n++ {
				code := g.do("GET", paths[n%len(paths)], "app-1").Code
				served.Add(1)
				if code != 200 && code != 429 {
					bad.Add(1)
					badCodes.Store(code, true)
				}
			}
		}(i)
	}
	const order = "      - api: /v1/order\n        method: [GET]\n        limit: 5\n"
	failed := 0
	for i := 0; i < 200; i++ {
		var content string
		switch i % 3 {
		case 0:
			content = "configs: [ broken"
		case 1:
			content = rulesWithLimit(1+i, order)
		default:
			content = rulesWithLimit(1+i, "")
		}
		if _, err := reloadTo(t, rules, path, content); err != nil {
			failed++
		}
	}
	stop.Store(true)
	wg.Wait()
	if got := bad.Load(); got != 0 {
		var codes []any
		badCodes.Range(func(k, _ any) bool { codes = append(codes, k); return true })
		t.Errorf("%d responses were neither 200 nor 429 (codes %v) of %d", got, codes, served.Load())
	}
	if failed != 67 {
		t.Errorf("failed reloads: got %d, want 67", failed)
	}
	if got := g.h.Rules().Source.SHA256; got != sha(rulesWithLimit(200, order)) {
		t.Errorf("rules in force after the last reload: %s.., want the last good file", got[:8])
	}
}

// TestWatchStartsWhenAFileReplacesTheBuiltInRules checks that a gateway
// started on the built-in rules (its rule file missing) watches the file
// once a reload brings it in force: later edits apply without SIGHUP.
func TestWatchStartsWhenAFileReplacesTheBuiltInRules(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	g := startLive(t, func(c *Config) {
		c.ConfigPath = path
		c.FallbackRules = []byte(rulesWithLimit(1, ""))
	})
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	writeFile(t, path, rulesWithLimit(2, ""))
	if err := g.srv.Reload(); err != nil { // what SIGHUP does
		t.Fatal(err)
	}
	g.logs.waitFor(t, 0, "watching the rule file")
	writeFile(t, path, rulesWithLimit(1000, ""))
	eventually.True(t, 10*time.Second, func() bool {
		return g.get(t, "/v1/user") == 200 && g.srv.rules.Rules().Source.SHA256 == sha(rulesWithLimit(1000, ""))
	},
		"the edit after the switch to the file never came into force")
}

// TestHalfWrittenFileNeverLoads writes a rule file in two halves 300ms
// apart, the first a valid file by itself, through the real server's
// watcher with its default debounce and settle time: the first half is
// never loaded, and the rule it lacks keeps its count.
func TestHalfWrittenFileNeverLoads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	order := "      - api: /v1/order\n        limit: 5\n        unit: 1h\n"
	writeFile(t, path, rulesWithLimit(5, order))
	g := startLive(t, func(c *Config) { c.ConfigPath, c.WatchSettle = path, watch.DefaultSettle })
	for i := range 3 {
		if code := g.get(t, "/v1/order"); code != 200 {
			t.Fatalf("spending /v1/order %d: got %d", i, code)
		}
	}

	first, whole := rulesWithLimit(6, ""), rulesWithLimit(6, order)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the writer's pause: the scenario, not a wait for the gateway
	if _, err := f.WriteString(whole[len(first):]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g.logs.waitFor(t, 0, "rules reloaded", "sha256", sha(whole))
	g.logs.mu.Lock()
	for _, r := range g.logs.records {
		if r.msg == "rules reloaded" && r.attrs["sha256"] == sha(first) {
			t.Errorf("the first half was loaded: %v", r.attrs)
		}
	}
	g.logs.mu.Unlock()
	for i, want := range []int{200, 200, 429} {
		if code := g.get(t, "/v1/order"); code != want {
			t.Errorf("/v1/order request %d after the edit: got %d, want %d (3 of 5 spent before)", i, code, want)
		}
	}
}

// TestOversizedRuleFileRefused checks --max-rules-bytes: a larger file is
// refused at a reload with an error naming the flag, and the rules in
// force stay.
func TestOversizedRuleFileRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, rulesWithLimit(5, ""))
	g := startLive(t, func(c *Config) { c.ConfigPath, c.MaxRulesBytes, c.Watch = path, 4096, false })
	writeFile(t, path, rulesWithLimit(7, "")+"# "+strings.Repeat("x", 5000)+"\n")
	changed, err := g.srv.rules.Reload()
	if changed || err == nil || !strings.Contains(err.Error(), "--max-rules-bytes") {
		t.Errorf("reload of a 5 KB file over a 4 KiB cap: changed %v, err %v; want an error naming --max-rules-bytes", changed, err)
	}
	if got := g.srv.rules.Rules().Source.SHA256; got != sha(rulesWithLimit(5, "")) {
		t.Errorf("rules in force changed to %s", got)
	}
}

// TestLimitChangingReloadsLeaveTheHeapFlat reloads 1,000 rule files, each
// changing a limit that 64 callers, spread over the store's shards, then
// use: the heap after the last is about what it was after the 200th. (Each
// edit used to leave its Params interned in every shard it reached: ~5 MiB
// here.) Not parallel: it measures the process's heap.
func TestLimitChangingReloadsLeaveTheHeapFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 1,000 reloads and 64,000 requests")
	}
	rules := func(n int) string {
		return fmt.Sprintf("configs:\n  - appId: \"*\"\n    limits:\n      - api: /\n        limit: %d\n        unit: 1h\n", 1000+n)
	}
	content := rules(0)
	g := newGW(t, content)
	r := g.reloader(func() (*config.Rules, error) { return config.Parse("rules.yaml", []byte(content)) })
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var at200 uint64
	for i := 1; i <= 1000; i++ {
		content = rules(i)
		if changed, err := r.Reload(); !changed || err != nil {
			t.Fatalf("reload %d: changed %v, err %v", i, changed, err)
		}
		for ip := range 64 {
			req := httptest.NewRequest("GET", "/x", nil)
			req.RemoteAddr = fmt.Sprintf("198.51.100.%d:1234", ip)
			w := httptest.NewRecorder()
			if g.h.ServeHTTP(w, req); w.Code != 200 {
				t.Fatalf("reload %d, caller %d: got %d", i, ip, w.Code)
			}
		}
		if i == 200 {
			at200 = heap()
			runtime.KeepAlive(g)
		}
	}
	end := heap()
	runtime.KeepAlive(g) // the store is what is measured
	t.Logf("heap after 200 reloads %.1f MiB, after 1,000 %.1f MiB", float64(at200)/(1<<20), float64(end)/(1<<20))
	if end > at200+2<<20 {
		t.Errorf("heap grew %.1f MiB over 800 limit-changing reloads, want it flat (< 2 MiB)", float64(end-at200)/(1<<20))
	}
}
