package serving

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listen returns a loopback listener closed at the test's end.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestRunDrains checks the drain: once the context ends Draining runs, a
// request in flight on the front server finishes with its response, the
// admin server answers while the front one drains, and Run returns nil
// once both have stopped.
func TestRunDrains(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	front := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	})}
	var draining atomic.Bool
	admin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			io.WriteString(w, "draining")
			return
		}
		io.WriteString(w, "ready")
	})}
	fl, al := listen(t), listen(t)
	adminSrv := HTTP(admin, al, false)
	adminSrv.Admin = true
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			Servers:         []Server{HTTP(front, fl, false), adminSrv},
			Started:         func() { close(started) },
			Draining:        func() { draining.Store(true) },
			ShutdownTimeout: time.Minute,
		})
	}()
	<-started
	if got, err := get("http://" + al.Addr().String()); err != nil || got != "ready" {
		t.Fatalf("admin before the drain: got %q, %v; want ready", got, err)
	}
	inFlight := make(chan string, 1)
	go func() {
		got, err := get("http://" + fl.Addr().String())
		if err != nil {
			got = err.Error()
		}
		inFlight <- got
	}()
	<-entered
	cancel()
	// The front server drains its request; the admin one answers
	// meanwhile, and says so.
	for {
		got, err := get("http://" + al.Addr().String())
		if err != nil {
			t.Fatalf("admin during the drain: %v", err)
		}
		if got == "draining" {
			break
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	close(release)
	if got := <-inFlight; got != "finished" {
		t.Errorf("request in flight: got %q, want finished", got)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: got %v, want nil", err)
	}
	if _, err := get("http://" + al.Addr().String()); err == nil {
		t.Error("the admin server still answers after Run returned")
	}
}

// TestRunAfter checks a server held back by After: it serves only once
// After is closed, and is closed unserved when the context ends first.
func TestRunAfter(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, release := range []bool{true, false} {
		ln := listen(t)
		srv := HTTP(&http.Server{Handler: ok}, ln, false)
		after := make(chan struct{})
		srv.After = after
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{Servers: []Server{srv}, Started: func() { close(started) }, ShutdownTimeout: time.Minute})
		}()
		if release {
			close(after)
			<-started
			if got, err := get("http://" + ln.Addr().String()); err != nil || got != "ok" {
				t.Errorf("after release: got %q, %v; want ok", got, err)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("release %v: Run: got %v, want nil", release, err)
		}
		select {
		case <-started:
			if !release {
				t.Error("Started ran though the server was never let go")
			}
		default:
		}
	}
}

// TestRunServerFails checks that a server that fails ends Run with its
// error, closing the others.
func TestRunServerFails(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	other := HTTP(&http.Server{Handler: http.NotFoundHandler()}, ln, false)
	broken := Server{
		Serve:    func() error { return errors.New("listener gone") },
		Shutdown: func(context.Context) error { return nil },
		Close:    func() error { return nil },
	}
	err := Run(context.Background(), Config{Servers: []Server{other, broken}, ShutdownTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "serving: listener gone") {
		t.Errorf("Run: got %v, want serving: listener gone", err)
	}
	if _, err := get("http://" + ln.Addr().String()); err == nil {
		t.Error("the other server still answers")
	}
}
