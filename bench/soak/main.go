// Command soak runs the gateway against bench/upstream for a while under
// mixed traffic and rule rewrites, and reports whether anything went
// wrong. bench/soak/run.sh (make soak) builds the binaries and runs it.
//
// Traffic, paced to -rate over -workers keep-alive connections, is a mix
// of classes, each with the statuses it may get (traffic.go): a configured
// app under its limits (200), one driven over its limit (200 or 429), bad
// app IDs and bad paths (400), and unknown callers from many client IPs,
// a few of them hot (200 or 429). Meanwhile the rule file is rewritten
// every -reload-every: two valid variants alternately and every fifth
// write a bad edit, which must be rejected with the rules unchanged
// (rules.go).
//
// The soak fails (exit 1) when a response has a status outside its
// class's, or none; when the gateway's goroutines other than those of
// open connections grew by more than -goroutine-slack between the end of
// the warm-up and the end, or more connections are open at the end than
// the workers can account for (goroutines.go); when a rule write was not
// taken as it should have been, or gateway_rules_reloads_total does not
// count the writes; when the limited classes were never limited; when the
// gateway logged an error other than the rejected edits'; or when it did
// not exit cleanly on SIGTERM. It prints a markdown report and saves it
// as -out/soak-<UTC timestamp>.md. It is a tool run by hand or by make
// soak, never by go test, and it must not change what it checks to get a
// pass: a failed run exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// options are the soak's flags.
type options struct {
	gateway, upstream string
	workdir, out      string
	duration, warmup  time.Duration
	reloadEvery       time.Duration
	rate, workers     int
	goroutineSlack    int
	portBase          int
	seed              uint64
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("soak: ")
	var o options
	flag.StringVar(&o.gateway, "gateway", "", "gateway binary (required)")
	flag.StringVar(&o.upstream, "upstream", "", "bench/upstream binary (required)")
	flag.StringVar(&o.workdir, "workdir", "", "directory for the rule file and the logs (required)")
	flag.StringVar(&o.out, "out", "bench/results", "directory the report is saved in")
	flag.DurationVar(&o.duration, "duration", envDuration("DURATION", 10*time.Minute), "how long the traffic runs, warm-up included (env DURATION)")
	flag.DurationVar(&o.warmup, "warmup", 0, "traffic before the start snapshot (default 30s, at most a quarter of -duration)")
	flag.DurationVar(&o.reloadEvery, "reload-every", 3*time.Second, "how often the rule file is rewritten")
	flag.IntVar(&o.rate, "rate", 1500, "requests per second over all workers (0: as fast as they go)")
	flag.IntVar(&o.workers, "workers", 16, "concurrent keep-alive connections")
	flag.IntVar(&o.goroutineSlack, "goroutine-slack", 4, "most the goroutines other than connections' may grow between the start and end snapshots")
	flag.IntVar(&o.portBase, "port-base", 18380, "upstream on port-base+1, proxy on +11, admin on +1011 (127.0.0.1)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the traffic mix")
	flag.Parse()
	if o.gateway == "" || o.upstream == "" || o.workdir == "" {
		log.Print("-gateway, -upstream and -workdir are required")
		os.Exit(2)
	}
	if o.warmup == 0 {
		o.warmup = min(30*time.Second, o.duration/4)
	}
	if o.duration <= 0 || o.warmup >= o.duration || o.workers <= 0 || o.rate < 0 {
		log.Print("need -duration > -warmup > 0, -workers > 0 and -rate >= 0")
		os.Exit(2)
	}
	if err := checkFixtures(); err != nil {
		log.Print(err)
		os.Exit(2)
	}
	r, err := soak(o)
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	text := r.markdown()
	fmt.Print(text)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		log.Fatal(err)
	}
	file := filepath.Join(o.out, "soak-"+r.stamp+".md")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("report written to %s", file)
	if len(r.failures) > 0 {
		os.Exit(1)
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			log.Fatalf("%s=%q: %v", name, v, err)
		}
		return d
	}
	return def
}

// proc is a child process and its end.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

func start(logPath, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to wait, then kills. It reports whether
// the process exited on its own with status 0.
func (p *proc) stop(wait time.Duration) (clean bool, how string) {
	if p.exited() {
		return false, fmt.Sprintf("had already exited: %v", p.err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return false, fmt.Sprintf("exited on SIGTERM with %v", p.err)
		}
		return true, "exited 0 on SIGTERM"
	case <-time.After(wait):
		p.cmd.Process.Kill()
		<-p.done
		return false, fmt.Sprintf("still running %s after SIGTERM; killed", wait)
	}
}

// soak runs the whole soak and returns its results. An error means the
// soak could not run at all.
func soak(o options) (*results, error) {
	r := &results{opts: o, started: time.Now().UTC(), reloads: &reloadStats{invalid: map[string]int{}}, tally: newTally()}
	r.stamp = r.started.Format("2006-01-02T150405Z")
	upstreamAddr := "127.0.0.1:" + strconv.Itoa(o.portBase+1)
	proxyAddr := "127.0.0.1:" + strconv.Itoa(o.portBase+11)
	admin := "http://127.0.0.1:" + strconv.Itoa(o.portBase+1011)

	rulesDir := filepath.Join(o.workdir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		return nil, err
	}
	rulesPath := filepath.Join(rulesDir, "ratelimiter-rule.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesA), 0o644); err != nil {
		return nil, err
	}
	up, err := start(filepath.Join(o.workdir, "upstream.log"), o.upstream, "-listen", upstreamAddr)
	if err != nil {
		return nil, err
	}
	defer up.stop(5 * time.Second)
	r.gatewayLog = filepath.Join(o.workdir, "gateway.log")
	gw, err := start(r.gatewayLog, o.gateway, "serve",
		"--config", rulesPath, "--upstream", "http://"+upstreamAddr,
		"--listen", proxyAddr, "--admin-listen", admin[len("http://"):],
		"--trusted-proxies", "127.0.0.1/32", "--log-level", "info", "--pprof")
	if err != nil {
		return nil, err
	}
	gwStopped := false
	defer func() {
		if !gwStopped {
			gw.stop(5 * time.Second)
		}
	}()

	admClient := &http.Client{Timeout: 5 * time.Second}
	if err := waitReady(admClient, admin, "http://"+upstreamAddr, gw); err != nil {
		return nil, err
	}
	if r.initial, err = scrape(admClient, admin); err != nil {
		return nil, err
	}

	sigCtx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(sigCtx, o.duration)
	defer cancelRun()
	trafficStart := time.Now()

	// gate lets the snapshots wait for quiet: requests and rule writes
	// hold it for reading.
	var gate sync.RWMutex
	tokens := pace(ctx, o.rate)
	client := &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        2 * o.workers,
			MaxIdleConnsPerHost: 2 * o.workers,
			IdleConnTimeout:     5 * time.Minute,
		},
		Timeout: 10 * time.Second,
	}
	var wg sync.WaitGroup
	for w := range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := &gen{rng: rand.New(rand.NewPCG(o.seed, uint64(w)))}
			for {
				if tokens != nil {
					select {
					case <-ctx.Done():
						return
					case <-tokens:
					}
				} else if ctx.Err() != nil {
					return
				}
				gate.RLock()
				send(client, proxyAddr, g, g.pick(), r.tally)
				gate.RUnlock()
			}
		}()
	}
	rw := &rewriter{path: rulesPath, admin: admin, client: admClient, timeout: 5 * time.Second, inForce: rulesA, stats: r.reloads}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(o.reloadEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				gate.RLock()
				rw.step()
				gate.RUnlock()
			}
		}
	}()
	samplesDone := make(chan struct{})
	go func() {
		defer close(samplesDone)
		every := max(o.duration/10, 5*time.Second)
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastN := time.Now(), int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				m, err := scrape(admClient, admin)
				n := r.tally.total.Load()
				if err == nil {
					r.samples = append(r.samples, sample{at: now.Sub(trafficStart), m: m, rps: float64(n-lastN) / now.Sub(last).Seconds()})
				} else {
					log.Print(err)
				}
				last, lastN = now, n
				log.Printf("%s: %d requests", now.Sub(trafficStart).Round(time.Second), n)
			}
		}
	}()

	// snapshot reads the metrics and goroutines with no request in flight
	// and the clients' connections closed, so that the start and the end
	// are alike.
	snapshot := func() (metrics, goroutines, error) {
		client.CloseIdleConnections()
		time.Sleep(time.Second) // for the gateway to see them closed
		m, err := scrape(admClient, admin)
		if err != nil {
			return m, goroutines{}, err
		}
		g, err := goroutineProfile(admClient, admin)
		return m, g, err
	}
	select {
	case <-ctx.Done():
	case <-time.After(o.warmup):
		gate.Lock()
		r.start, r.startG, err = snapshot()
		gate.Unlock()
		if err != nil {
			return nil, err
		}
		log.Printf("after the %s warm-up: %s", o.warmup, r.start.summary())
	}
	<-ctx.Done()
	r.interrupted = sigCtx.Err() != nil
	wg.Wait()
	<-samplesDone
	r.elapsed = time.Since(trafficStart)
	if r.end, r.endG, err = snapshot(); err != nil {
		r.fail("the end snapshot: %v", err)
	} else {
		log.Printf("at the end: %s", r.end.summary())
	}
	gwStopped = true
	clean, how := gw.stop(40 * time.Second)
	r.shutdown = how
	if !clean {
		r.fail("gateway shutdown: %s", how)
	}
	if err := r.readLog(); err != nil {
		r.fail("reading the gateway log: %v", err)
	}
	r.judge()
	return r, nil
}

// waitReady waits for the upstream and for the gateway's /readyz.
func waitReady(c *http.Client, admin, upstream string, gw *proc) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, u := range []string{upstream + "/", admin + "/readyz"} {
		for {
			if gw.exited() {
				return fmt.Errorf("the gateway exited at start: %v", gw.err)
			}
			resp, err := c.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return errors.Join(fmt.Errorf("%s never answered 200", u), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// pace returns a channel that yields rate tokens a second, or nil for no
// pacing. Tokens that no worker takes are dropped: a slow gateway gets
// less traffic, not a backlog.
func pace(ctx context.Context, rate int) <-chan struct{} {
	if rate == 0 {
		return nil
	}
	tokens := make(chan struct{}, max(rate/10, 1))
	go func() {
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		owed, t0, sent := 0.0, time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				owed = now.Sub(t0).Seconds()*float64(rate) - float64(sent)
				for ; owed >= 1; owed-- {
					sent++
					select {
					case tokens <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return tokens
}
