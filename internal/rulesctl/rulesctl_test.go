package rulesctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/rulesctl"
	"github.com/ratelimit-gateway/gateway/internal/server"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// wait bounds the waits for something asynchronous (a write reaching the
// gateways): generous, for a loaded machine.
const wait = 30 * time.Second

const key = "/gateway/rules"

// rules returns rules in which app a may call /v1 limit times an hour,
// and the apps extra without a limit.
func rules(limit int, extra ...string) string {
	s := "configs:\n- appId: a\n  limits:\n  - {api: /v1, limit: " + strconv.Itoa(limit) + ", unit: 1h}\n"
	for _, app := range extra {
		s += "- appId: " + app + "\n  limits:\n  - {api: /, limit: -1}\n"
	}
	return s
}

// invalid has two problems, on lines 4 and 5.
const invalid = "configs:\n- appId: a\n  limits:\n  - {api: /v1, limit: -5}\n  - {api: /w, limit: 1, colour: red}\n"

// backend is a real store the tests start, and what they do to it
// behind the gateways' and push's backs.
type backend struct {
	// url is the URL of key.
	url string
	// put writes value to key as another client would, and returns its
	// version.
	put func(t *testing.T, value string) int64
	// fingerprint returns what moves with any write to the store.
	fingerprint func(t *testing.T) int64
	stop        func()
	restart     func()
}

// backends are the stores every test runs on.
var backends = []struct {
	name  string
	start func(t *testing.T) *backend
}{
	{"etcd", func(t *testing.T) *backend {
		srv := etcdtest.Start(t)
		return &backend{
			url: srv.URL(key),
			put: func(t *testing.T, value string) int64 {
				resp, err := srv.Client().Put(context.Background(), key, value)
				if err != nil {
					t.Fatal(err)
				}
				return resp.Header.Revision
			},
			fingerprint: func(t *testing.T) int64 {
				resp, err := srv.Client().Get(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				return resp.Header.Revision
			},
			stop: srv.Stop, restart: srv.Restart,
		}
	}},
	{"zookeeper", func(t *testing.T) *backend {
		srv := zktest.Start(t)
		return &backend{
			url: srv.URL(key),
			put: func(t *testing.T, value string) int64 {
				stat, err := srv.Client().Set(key, []byte(value), -1)
				if err != nil {
					t.Fatal(err)
				}
				return int64(stat.Version)
			},
			fingerprint: func(*testing.T) int64 { return srv.Zxid() },
			stop:        srv.Stop, restart: srv.Restart,
		}
	}},
}

// eachBackend runs test on each store, one after the other.
func eachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { test(t, be.start(t)) })
	}
}

func openStore(t *testing.T, b *backend) source.Store {
	t.Helper()
	st, err := source.NewStore(source.Config{Spec: b.url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func push(t *testing.T, cfg rulesctl.Config, data string) rulesctl.Result {
	t.Helper()
	res, err := rulesctl.Push(context.Background(), cfg, "rules.yaml", []byte(data))
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

// gateway is a gateway serving from the store's key, with the demo upstream,
// until the test ends.
type gateway struct {
	proxy, admin string
}

func startGateway(t *testing.T, b *backend) *gateway {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.ConfigPath = b.url
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DemoUpstream = true
	cfg.SourceProbeInterval = 200 * time.Millisecond
	// The gateway's log, printed if the test fails.
	log := &gwtest.Log{}
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", log.Tail(64<<10))
		}
	})
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &gateway{proxy: "http://" + s.Addr().String(), admin: "http://" + s.AdminAddr().String()}
}

// rulesView is the part of GET /rules the tests read.
type rulesView struct {
	SHA256    string `json:"sha256"`
	LastError string `json:"lastError"`
	Source    struct {
		Version   string `json:"version"`
		Connected bool   `json:"connected"`
		Error     string `json:"error"`
	} `json:"source"`
}

// rulesNow prints GET /rules of a gateway as it is when printed: a
// failure message's argument, read when the wait failed.
type rulesNow struct{ g *gateway }

func (r rulesNow) String() string {
	resp, err := http.Get(r.g.admin + "/rules")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (g *gateway) rules(t *testing.T) rulesView {
	t.Helper()
	resp, err := http.Get(g.admin + "/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v rulesView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitVersion waits until every gateway is at version.
func waitVersion(t *testing.T, version int64, gws ...*gateway) {
	t.Helper()
	want := strconv.FormatInt(version, 10)
	for i, g := range gws {
		eventually.True(t, wait, func() bool { return g.rules(t).Source.Version == want }, "gateway %d is not at version %s: %+v", i, want, g.rules(t))
	}
}

func status(t *testing.T, url, app string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-App-Id", app)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestFleet runs the push workflow on two gateways serving from one
// store's key: a push reaches both; an invalid push is refused with every
// problem at file:line and writes nothing at all; an invalid value
// written behind push's back is refused by the gateways, which keep
// their rules and show it in /rules; a push on a stale --expect-version
// is refused, naming the current version; the history lists the
// versions replaced, checked; and a rollback restores one, which the
// gateways take.
func TestFleet(t *testing.T) { eachBackend(t, testFleet) }

func testFleet(t *testing.T, be *backend) {
	ctx := context.Background()
	cfg := rulesctl.Config{Store: openStore(t, be), Keep: rulesctl.DefaultKeep}

	v1 := push(t, cfg, rules(1))
	if v1.Previous != source.NoVersion || v1.Unchanged {
		t.Fatalf("first push: got %+v, want a new key", v1)
	}
	a, b := startGateway(t, be), startGateway(t, be)
	waitVersion(t, v1.Version, a, b)
	if got := status(t, a.proxy+"/v1", "a"); got != 200 {
		t.Fatalf("a's first request: got %d, want 200", got)
	}

	// A push reaches both gateways: b is a new app, and a's limit of 2
	// applies to the count already made.
	v2 := push(t, cfg, rules(2, "b"))
	if v2.Previous != v1.Version {
		t.Errorf("second push: replaced version %d, want %d", v2.Previous, v1.Version)
	}
	waitVersion(t, v2.Version, a, b)
	for i, g := range []*gateway{a, b} {
		if got := status(t, g.proxy+"/v1", "b"); got != 200 {
			t.Errorf("gateway %d, app b: got %d, want 200", i, got)
		}
	}
	if got := push(t, cfg, rules(2, "b")); !got.Unchanged || got.Version != v2.Version {
		t.Errorf("the same push again: got %+v, want unchanged at %d", got, v2.Version)
	}

	// An invalid push is refused, every problem at its line, and writes
	// nothing: not the key, not the history.
	before := be.fingerprint(t)
	_, err := rulesctl.Push(ctx, cfg, "bad.yaml", []byte(invalid))
	var inv *rulesctl.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("invalid push: got %v, want an InvalidError", err)
	}
	problems := strings.Join(inv.Problems(), "\n")
	for _, want := range []string{"bad.yaml:4: limit -5 is below -1", "bad.yaml:5: ", "colour"} {
		if !strings.Contains(problems, want) {
			t.Errorf("invalid push: the problems lack %q:\n%s", want, problems)
		}
	}
	if len(inv.Problems()) != 2 {
		t.Errorf("invalid push: got %d problems, want 2:\n%s", len(inv.Problems()), problems)
	}
	if after := be.fingerprint(t); after != before {
		t.Errorf("invalid push: the store moved from %d to %d", before, after)
	}
	if cur, _ := rulesctl.Get(ctx, cfg.Store); cur.Version != v2.Version || string(cur.Data) != rules(2, "b") {
		t.Errorf("after the invalid push: got %q at %d, want version %d unchanged", cur.Data, cur.Version, v2.Version)
	}
	// A file the gateways would read in another format is refused too.
	if _, err := rulesctl.Push(ctx, cfg, "rules.json", []byte("configs: []\n")); !errors.As(err, &inv) || !strings.Contains(err.Error(), "the gateways would read the key") {
		t.Errorf("a .json file read as YAML: got %v, want it refused", err)
	}

	// An invalid value written behind push's back: the gateways keep
	// version 2 and say why in /rules.
	behind := be.put(t, invalid)
	before = be.fingerprint(t)
	for i, g := range []*gateway{a, b} {
		eventually.True(t, wait, func() bool {
			return strings.Contains(g.rules(t).LastError, be.url+":4: limit -5 is below -1")
		}, "gateway %d does not show the invalid value's error: %+v", i, g.rules(t))
		if v := g.rules(t).Source.Version; v != strconv.FormatInt(v2.Version, 10) {
			t.Errorf("gateway %d after the invalid value: at version %s, want %d still", i, v, v2.Version)
		}
		if got := status(t, g.proxy+"/v1", "b"); got != 200 {
			t.Errorf("gateway %d after the invalid value, app b: got %d, want 200 (the rules in force)", i, got)
		}
	}

	// A push on the version its author read, now stale, is refused with
	// the current version, and writes nothing.
	stale := cfg
	stale.Expect, stale.ExpectVersion = true, v2.Version
	_, err = rulesctl.Push(ctx, stale, "rules.yaml", []byte(rules(3, "b")))
	var conflict *source.ConflictError
	if !errors.As(err, &conflict) || conflict.Current != behind || !strings.Contains(err.Error(), "at version "+strconv.FormatInt(behind, 10)) {
		t.Fatalf("push on a stale --expect-version: got %v, want a conflict naming version %d", err, behind)
	}
	if after := be.fingerprint(t); after != before {
		t.Errorf("stale push: the store moved from %d to %d", before, after)
	}
	stale.ExpectVersion = behind
	v3 := push(t, stale, rules(3, "b"))
	waitVersion(t, v3.Version, a, b)

	// The history: the current value, then those pushes replaced, newest
	// first, the invalid one marked. Version 2 is not there: a write
	// behind push's back replaced it.
	entries, err := rulesctl.History(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		s := strconv.FormatInt(e.Version, 10)
		if e.Current {
			s += " current"
		}
		if e.Err != nil {
			s += " invalid"
		}
		got = append(got, s)
	}
	want := []string{
		strconv.FormatInt(v3.Version, 10) + " current", strconv.FormatInt(behind, 10) + " invalid",
		strconv.FormatInt(v1.Version, 10),
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("history: got %q, want %q", got, want)
	}

	// Rollback: to the invalid value, refused; to a version not kept,
	// refused; to version 1, which the gateways take.
	if _, err := rulesctl.Rollback(ctx, cfg, behind); !errors.As(err, &inv) || !strings.Contains(err.Error(), "@"+strconv.FormatInt(behind, 10)+":4:") {
		t.Errorf("rollback to the invalid value: got %v, want it refused at its line", err)
	}
	if _, err := rulesctl.Rollback(ctx, cfg, 999999); err == nil || !strings.Contains(err.Error(), "not in the history") {
		t.Errorf("rollback to an unknown version: got %v", err)
	}
	v4, err := rulesctl.Rollback(ctx, cfg, v1.Version)
	if err != nil {
		t.Fatal(err)
	}
	waitVersion(t, v4.Version, a, b)
	for i, g := range []*gateway{a, b} {
		if r := g.rules(t); r.SHA256 != v1.Rules.Source.SHA256 || r.LastError != "" {
			t.Errorf("gateway %d after the rollback: %+v, want version 1's rules (sha256 %s), no error", i, r, v1.Rules.Source.SHA256)
		}
	}
	// a spent one request on gateway a, which version 1 allows it.
	if got := status(t, a.proxy+"/v1", "a"); got != 429 {
		t.Errorf("gateway 0 after the rollback, app a: got %d, want 429 (version 1's limit of 1)", got)
	}
}

// racing is a store on which someone else writes right after each Get:
// the fault a compare-and-set exists for.
type racing struct {
	source.Store
	t     *testing.T
	be    *backend
	value string
}

func (r *racing) Get(ctx context.Context) (source.Value, error) {
	v, err := r.Store.Get(ctx)
	r.be.put(r.t, r.value)
	return v, err
}

// TestPushRace checks that a push without --expect-version writes only
// on the version it read just before: a write in between makes it fail
// and leaves the other write in place.
func TestPushRace(t *testing.T) {
	eachBackend(t, func(t *testing.T, be *backend) {
		st := openStore(t, be)
		cfg := rulesctl.Config{Store: st, Keep: rulesctl.DefaultKeep}
		push(t, cfg, rules(1))
		cfg.Store = &racing{Store: st, t: t, be: be, value: rules(7)}
		_, err := rulesctl.Push(context.Background(), cfg, "rules.yaml", []byte(rules(2)))
		var conflict *source.ConflictError
		if !errors.As(err, &conflict) {
			t.Fatalf("push with a write in between: got %v, want a conflict", err)
		}
		cur, err := st.Get(context.Background())
		if err != nil || string(cur.Data) != rules(7) || cur.Version != conflict.Current {
			t.Errorf("after the conflict: got %q at %d, %v; want the other write, at the version the conflict names (%d)", cur.Data, cur.Version, err, conflict.Current)
		}
	})
}

// TestStoreRestartUnderLoad sends requests through a gateway without a
// pause while the store stops and starts again: none fails, the rules stay in
// force throughout, and the next push is taken.
func TestStoreRestartUnderLoad(t *testing.T) { eachBackend(t, testRestartUnderLoad) }

func testRestartUnderLoad(t *testing.T, be *backend) {
	cfg := rulesctl.Config{Store: openStore(t, be), Keep: rulesctl.DefaultKeep}
	v1 := push(t, cfg, rules(1, "load"))
	g := startGateway(t, be)
	waitVersion(t, v1.Version, g)

	var sent, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: wait}
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", g.proxy+"/v1", nil)
			req.Header.Set("X-App-Id", "load")
			resp, err := client.Do(req)
			sent.Add(1)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = errors.New(resp.Status)
				}
			}
			if err != nil {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}
	}()
	progress := func(n int64) {
		t.Helper()
		target := sent.Load() + n
		eventually.True(t, wait, func() bool { return sent.Load() >= target }, "the request loop is stuck")
	}

	progress(10)
	be.stop()
	eventually.True(t, wait, func() bool { return !g.rules(t).Source.Connected }, "the gateway did not notice the store stopped")
	progress(10)
	if r := g.rules(t); r.Source.Version != strconv.FormatInt(v1.Version, 10) || r.SHA256 != v1.Rules.Source.SHA256 {
		t.Errorf("with the store stopped: %+v, want version %d in force", r, v1.Version)
	}
	be.restart()
	eventually.True(t, wait, func() bool { return g.rules(t).Source.Connected }, "the gateway did not reconnect: %v", rulesNow{g})
	progress(10)

	v2 := push(t, cfg, rules(1, "load", "new"))
	waitVersion(t, v2.Version, g)
	progress(10)
	close(stop)
	wg.Wait()
	if got := status(t, g.proxy+"/v1", "new"); got != 200 {
		t.Errorf("the pushed app after the restart: got %d, want 200", got)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across the store's restart; the first: %v", n, sent.Load(), firstFailure.Load())
	}
	t.Logf("%d requests across the restart", sent.Load())
}
