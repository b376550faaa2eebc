// Command diff sends the same sequence of ShouldRateLimit calls to
// envoyproxy/ratelimit and to `gateway rls`, side by side on one real
// redis-server, and reports every way their answers differ: the overall
// code, per descriptor the code, current_limit, limit_remaining and
// duration_until_reset, the dynamic metadata and (from their
// environment) their response headers. bench/rls/diff/run.sh
// builds both and runs it; docs/rls.md ("Declared differences") explains
// what it finds.
//
// Three services run: envoyproxy/ratelimit (Redis DB 0) on copies of its
// own example and test configs; `gateway rls` from envoyproxy/ratelimit's
// environment (reference counting, DB 1) on the same files; and `gateway
// rls` with its defaults (DB 2) on fixed_window copies of them, so that
// both count in the same epoch-aligned windows. Each case runs on copies
// of its config under a domain of its own, so that no case sees another's
// counters; a case runs within one wall-clock second (a per-second limit
// sees one window) and runs again, on fresh copies, when it did not.
//
// Every difference must be declared: a case names, per mode, the
// difference of docs/rls.md that explains what it shows. The command
// exits 1 when a case differs without a declaration, and reports
// declarations that no longer show a difference.
//
// It speaks only the public protocol, so that both services are asked
// alike; it is a tool, not a test, and is run by hand or by run.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// attempts is how many fresh copies of its config a case may use: it
// runs again when it straddled a second.
const attempts = 4

func main() {
	ratelimit := flag.String("ratelimit", "", "envoyproxy/ratelimit's binary (go build ./src/service_cmd)")
	gateway := flag.String("gateway", "", "the gateway binary")
	testdata := flag.String("testdata", "internal/rlsconfig/testdata/envoyproxy", "envoyproxy/ratelimit's config files")
	redisServer := flag.String("redis-server", "redis-server", "the redis-server binary")
	only := flag.String("run", "", "run only the cases whose name matches this regexp")
	out := flag.String("out", "", "also write the report (Markdown) to this file")
	verbose := flag.Bool("v", false, "list every difference, not only the first two of each case")
	compatArgs := flag.String("compat-args", "", "flags for gateway-compat (with --from-env), space-separated")
	defaultArgs := flag.String("default-args", "", "more flags for gateway-default, space-separated")
	refVersion := flag.String("ref-version", "", "envoyproxy/ratelimit's version, for the report")
	flag.Parse()
	if *ratelimit == "" || *gateway == "" {
		fmt.Fprintln(os.Stderr, "usage: diff -ratelimit BIN -gateway BIN [-testdata DIR] [-run REGEXP] [-out FILE]")
		os.Exit(2)
	}
	cases := allCases()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fatal(err)
		}
		cases = slices.DeleteFunc(cases, func(c testCase) bool { return !re.MatchString(c.name) })
	}
	r, err := newRun(*ratelimit, *gateway, *testdata, *redisServer, cases, strings.Fields(*compatArgs), strings.Fields(*defaultArgs))
	if err != nil {
		fatal(err)
	}
	defer r.stop()
	report, undeclared, err := r.runAll(*verbose, *refVersion)
	if err != nil {
		r.stop()
		fatal(err)
	}
	fmt.Print(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			r.stop()
			fatal(err)
		}
	}
	if undeclared > 0 {
		r.stop()
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "diff:", err)
	os.Exit(2)
}

// The services, by the Redis DB each counts in.
const (
	svcRef = iota
	svcCompat
	svcDefault
	nsvc
)

// modes are the gateway services compared with envoyproxy/ratelimit.
var modes = []struct {
	svc  int
	name string
	what string
	// headers reports whether the response headers are compared: from
	// the environment both add envoyproxy/ratelimit's
	// (LIMIT_RESPONSE_HEADERS_ENABLED); the defaults add none.
	headers bool
}{
	{svcCompat, "compat", "from envoyproxy/ratelimit's environment (reference counting)", true},
	{svcDefault, "default", "with the gateway's defaults, on fixed_window copies of the configs", false},
}

type run struct {
	work    string
	cases   []testCase
	procs   []*exec.Cmd
	logs    []string
	clients [nsvc]rlsv3.RateLimitServiceClient
	conns   []*grpc.ClientConn
}

func newRun(ratelimit, gateway, testdata, redisServer string, cases []testCase, compatArgs, defaultArgs []string) (*run, error) {
	work, err := os.MkdirTemp("", "rlsdiff")
	if err != nil {
		return nil, err
	}
	r := &run{work: work, cases: cases}
	if err := r.writeConfigs(testdata); err != nil {
		r.stop()
		return nil, err
	}
	ports := make([]int, 10)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			r.stop()
			return nil, err
		}
	}
	redis := "127.0.0.1:" + strconv.Itoa(ports[0])
	if err := r.start("redis", nil, redisServer, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", work); err != nil {
		r.stop()
		return nil, err
	}
	if err := waitPort(redis); err != nil {
		err = r.withLog(err)
		r.stop()
		return nil, err
	}
	// envoyproxy/ratelimit's environment, as its docs and Helm chart set
	// it; the gateway reads the same (docs/rls.md, "Running as
	// envoyproxy/ratelimit").
	env := func(sub, redisURL string, grpcPort, httpPort, debugPort int) []string {
		return []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
			"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisURL,
			"RUNTIME_ROOT=" + work, "RUNTIME_SUBDIRECTORY=" + sub, "RUNTIME_WATCH_ROOT=false",
			"RESPONSE_DYNAMIC_METADATA=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true",
			"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
			"HOST=127.0.0.1", "PORT=" + strconv.Itoa(httpPort),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(debugPort),
		}
	}
	grpcAddr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	if err := r.start("envoyproxy-ratelimit", env("ref", redis, ports[1], ports[2], ports[3]), ratelimit); err != nil {
		r.stop()
		return nil, err
	}
	compat := []string{"rls"}
	if len(compatArgs) > 0 {
		compat = append(append(compat, "--from-env"), compatArgs...)
	}
	if err := r.start("gateway-compat", env("compat", "redis://"+redis+"/1", ports[4], ports[5], ports[6]), gateway, compat...); err != nil {
		r.stop()
		return nil, err
	}
	args := append([]string{"rls",
		"--config", filepath.Join(work, "default", "config"), "--listen", grpcAddr(ports[7]), "--admin-listen", grpcAddr(ports[8]),
		"--store", "redis", "--redis-url", "redis://" + redis + "/2", "--redis-timeout", "5s", "--dynamic-metadata", "--log-level", "warn"},
		defaultArgs...)
	if err := r.start("gateway-default", []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, gateway, args...); err != nil {
		r.stop()
		return nil, err
	}
	for svc, p := range map[int]int{svcRef: ports[1], svcCompat: ports[4], svcDefault: ports[7]} {
		conn, err := grpc.NewClient(grpcAddr(p), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			r.stop()
			return nil, err
		}
		r.conns = append(r.conns, conn)
		if err := waitServing(conn); err != nil {
			err = r.withLog(err)
			r.stop()
			return nil, err
		}
		r.clients[svc] = rlsv3.NewRateLimitServiceClient(conn)
	}
	return r, nil
}

// start starts a process that stop ends, its output in a log file.
func (r *run) start(name string, env []string, bin string, args ...string) error {
	log := filepath.Join(r.work, name+".log")
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = env
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	f.Close()
	r.procs = append(r.procs, cmd)
	r.logs = append(r.logs, log)
	return nil
}

// withLog adds the logs of the processes started to err.
func (r *run) withLog(err error) error {
	var b strings.Builder
	for _, l := range r.logs {
		body, _ := os.ReadFile(l)
		if len(body) > 2000 {
			body = body[len(body)-2000:]
		}
		fmt.Fprintf(&b, "\n--- %s\n%s", filepath.Base(l), body)
	}
	return fmt.Errorf("%w%s", err, b.String())
}

func (r *run) stop() {
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	for _, p := range r.procs {
		p.Process.Kill()
		p.Wait()
	}
	r.procs = nil
	os.RemoveAll(r.work)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPort(addr string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not listen within a minute", addr)
}

func waitServing(conn *grpc.ClientConn) error {
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not serving within a minute: %v", conn.Target(), last)
}

// domainOf names the domain of a case's attempt.
func domainOf(c, attempt int) string { return fmt.Sprintf("c%03d-a%d", c, attempt) }

// writeConfigs writes, for every case and attempt, its config under the
// attempt's domain: as it is for envoyproxy/ratelimit and gateway-compat,
// with algorithm: fixed_window on every limit for gateway-default.
func (r *run) writeConfigs(testdata string) error {
	for _, sub := range []string{"ref", "compat", "default"} {
		if err := os.MkdirAll(filepath.Join(r.work, sub, "config"), 0o755); err != nil {
			return err
		}
	}
	for ci, c := range r.cases {
		src, ok := builtin[c.config]
		if !ok {
			b, err := os.ReadFile(filepath.Join(testdata, c.config))
			if err != nil {
				return fmt.Errorf("case %s: %w", c.name, err)
			}
			src = string(b)
		}
		for a := range attempts {
			dom := domainOf(ci, a)
			orig, err := rewrite(src, dom, false)
			if err != nil {
				return fmt.Errorf("%s: %w", c.config, err)
			}
			fixed, err := rewrite(src, dom, true)
			if err != nil {
				return fmt.Errorf("%s: %w", c.config, err)
			}
			name := dom + ".yaml"
			for sub, body := range map[string][]byte{"ref": orig, "compat": orig, "default": fixed} {
				if err := os.WriteFile(filepath.Join(r.work, sub, "config", name), body, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runAll runs every case and returns the report and how many cases
// differ without a declaration.
func (r *run) runAll(verbose bool, refVersion string) (string, int, error) {
	type result struct {
		requests int
		diffs    [][]string // per request, its differences
	}
	results := make([][]result, len(r.cases)) // [case][mode]
	var retries, withHeaders int
	for ci, c := range r.cases {
		for a := 0; ; a++ {
			if a == attempts {
				return "", 0, fmt.Errorf("case %s straddled a second %d times: the machine is too busy", c.name, attempts)
			}
			waitSlot()
			start := time.Now()
			res := make([]result, len(modes))
			for _, st := range c.steps {
				dom := domainOf(ci, a)
				if st.domain != "" {
					dom = st.domain
				}
				for range max(st.times, 1) {
					req := st.request(dom)
					var answers [nsvc]answer
					for svc := range nsvc {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						resp, err := r.clients[svc].ShouldRateLimit(ctx, req)
						cancel()
						answers[svc] = answer{resp, err}
					}
					if len(answers[svcRef].resp.GetResponseHeadersToAdd()) > 0 {
						withHeaders++
					}
					for mi, m := range modes {
						res[mi].requests++
						d := compare(answers[svcRef], answers[m.svc], m.headers)
						res[mi].diffs = append(res[mi].diffs, d)
					}
				}
			}
			if time.Now().Unix() == start.Unix() {
				results[ci] = res
				break
			}
			retries++
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# gateway rls against envoyproxy/ratelimit %s: a differential run\n\n", refVersion)
	fmt.Fprintf(&b, "bench/rls/diff at %s, %d CPUs: %d cases; %d run again for straddling a second. Per mode: the calls sent to both, "+
		"those whose answers differ, and the cases that differ without a declared difference of docs/rls.md.\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), len(r.cases), retries)
	fmt.Fprintf(&b, "envoyproxy/ratelimit added its response headers to %d calls; compat's are compared.\n\n", withHeaders)
	fmt.Fprintf(&b, "| mode | | calls | calls that differ | cases that differ | undeclared |\n|---|---|---:|---:|---:|---:|\n")
	undeclared := 0
	var detail strings.Builder
	for mi, m := range modes {
		calls, differ, casesDiffer, und := 0, 0, 0, 0
		fmt.Fprintf(&detail, "\n## %s: %s\n\n", m.name, m.what)
		for ci, c := range r.cases {
			res := results[ci][mi]
			calls += res.requests
			n := 0
			for _, d := range res.diffs {
				if len(d) > 0 {
					n++
				}
			}
			differ += n
			decl := c.declared[m.name]
			switch {
			case n > 0 && decl == "":
				und++
				casesDiffer++
				fmt.Fprintf(&detail, "- **%s** (%s): %d of %d calls differ, **undeclared**\n", c.name, c.config, n, res.requests)
			case n > 0:
				casesDiffer++
				fmt.Fprintf(&detail, "- %s (%s): %d of %d calls differ: %s\n", c.name, c.config, n, res.requests, decl)
			case decl != "":
				fmt.Fprintf(&detail, "- %s (%s): declared %q, but no call differs\n", c.name, c.config, decl)
				continue
			default:
				continue
			}
			shown := 0
			for i, d := range res.diffs {
				if len(d) == 0 || (!verbose && shown == 2) {
					continue
				}
				shown++
				fmt.Fprintf(&detail, "  - call %d (%s): %s\n", i+1, c.describe(i), strings.Join(d, "; "))
			}
		}
		undeclared += und
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", m.name, m.what, calls, differ, casesDiffer, und)
	}
	b.WriteString(detail.String())
	return b.String(), undeclared, nil
}

// waitSlot waits for the first 300 ms of a second that is not one of the
// last two of its minute, so that a case runs within one window of every
// unit (all are whole minutes but the second).
func waitSlot() {
	for {
		now := time.Now()
		if now.Nanosecond() < 300e6 && now.Second() < 58 {
			return
		}
		time.Sleep(now.Truncate(time.Second).Add(time.Second + 5*time.Millisecond).Sub(now))
	}
}
