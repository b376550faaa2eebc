package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/gwtest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/internal/zktest"
)

// The documentation's shell examples are run by TestDocExamples. It reads
// README.md and every docs/**/*.md, and for each fenced block:
//
//   - a block with no language fails the test: tag it sh or console (a
//     shell example), or text, yaml, json… (not run);
//   - sh, bash and shell blocks run as one bash script from the
//     repository root, which must exit 0;
//   - console blocks hold "$ command" lines (continued by a trailing
//     backslash), each followed by the output it prints (stdout and
//     stderr): each command runs from the repository root, must exit 0
//     and print exactly that, where "…" in an output line stands for any
//     text;
//   - `gateway` is the binary TestMain built, first on PATH, and no
//     GATEWAY_* variable of the test's environment is passed on;
//   - a block that names an address other than this machine's loopback,
//     or runs sudo, docker, kubectl, systemctl or make, is not run and
//     fails the test unless it is marked skip: nothing here may reach
//     another machine.
//
// A comment on the line before a shell block's fence says how to run it:
//
//	<!-- example: skip: REASON -->   not run, for the reason given (it
//	                                 needs Docker, an etcd cluster, …);
//	                                 the reason is required
//	<!-- example: gateway ARGS -->   run once a gateway started with
//	                                 `gateway serve ARGS` listens; the
//	                                 block's localhost:8080 and
//	                                 localhost:9090 become its proxy and
//	                                 admin addresses
//	<!-- example: rls ARGS -->       likewise with `gateway rls ARGS`;
//	                                 localhost:9091 becomes its admin
//	                                 address
//	<!-- example: redis; gateway ARGS; gateway ARGS -->
//	                                 the parts, separated by ";", in
//	                                 order: redis, etcd and zk start a
//	                                 real server whose address replaces
//	                                 localhost:6379, :2379 and :2181 in
//	                                 the block and in later ARGS; a
//	                                 second gateway's addresses replace
//	                                 localhost:8081 and localhost:9091
//	                                 (a third's :8082 and :9092…);
//	                                 redis-cluster starts a Cluster of
//	                                 three for localhost:7000,
//	                                 localhost:7001,localhost:7002, and
//	                                 redis-sentinel a Sentinel watching
//	                                 a Redis as mymaster for
//	                                 localhost:26379
//	<!-- example: starts -->         each `gateway serve` or `gateway
//	                                 rls` line of the block serves until
//	                                 stopped: it must start and listen
//	                                 (on free ports), and is stopped at
//	                                 the end; with redis, etcd or zk too
//	<!-- example: file PATH -->      on any block: it must be the file
//	                                 PATH (from the repository root),
//	                                 line for line, so that an example
//	                                 run on that file shows what the
//	                                 page shows
//
// so that an example needing a running gateway, Redis or a cluster says
// so where it is written, and a docs page split off the README keeps its
// examples tested.

// docFiles returns README.md and the Markdown files under docs/, relative
// to the repository root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	where     string // file:line of the opening fence
	lang      string
	directive string // what the <!-- example: … --> before it says, "" if none
	lines     []string
}

var directiveRE = regexp.MustCompile(`^<!--\s*example:\s*(.*?)\s*-->$`)

// docBlocks returns the fenced blocks of a Markdown file.
func docBlocks(t *testing.T, root, file string) []docBlock {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []docBlock
		cur     *docBlock
		fence   string
		lastTxt string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, line)
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			i := strings.IndexFunc(trimmed, func(r rune) bool { return r != '`' && r != '~' })
			if i < 0 {
				i = len(trimmed)
			}
			fence = trimmed[:i]
			lang, _, _ := strings.Cut(strings.TrimSpace(trimmed[i:]), " ")
			cur = &docBlock{where: file + ":" + strconv.Itoa(n), lang: lang}
			if m := directiveRE.FindStringSubmatch(lastTxt); m != nil {
				cur.directive = m[1]
			}
			continue
		}
		if trimmed != "" {
			lastTxt = trimmed
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: the fenced block is never closed", cur.where)
	}
	return blocks
}

var shellLangs = []string{"sh", "bash", "shell", "console"}

// TestDocExamples runs the shell examples of README.md and docs/**/*.md
// against the real binary and the files they name (see the comment
// above), and checks that the commands the CLI section lists exist.
func TestDocExamples(t *testing.T) {
	if binary == "" {
		t.Skip("-short: the examples need the gateway binary")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	commands := cliCommands(t)
	var run, skipped int
	for _, file := range docFiles(t, root) {
		for _, b := range docBlocks(t, root, file) {
			if path, ok := strings.CutPrefix(b.directive, "file "); ok {
				checkFileBlock(t, root, b, strings.TrimSpace(path))
				continue
			}
			switch {
			case b.lang == "":
				t.Errorf("%s: a fenced block without a language: tag it sh or console (a shell example, which this test runs) or text", b.where)
				continue
			case b.lang == "text":
				checkListedCommands(t, b, commands)
				continue
			case !slices.Contains(shellLangs, b.lang):
				continue
			}
			if reason, ok := strings.CutPrefix(b.directive, "skip:"); ok {
				if strings.TrimSpace(reason) == "" {
					t.Errorf("%s: <!-- example: skip: --> without a reason", b.where)
				}
				skipped++
				continue
			}
			run++
			t.Run(strings.ReplaceAll(b.where, "/", "_"), func(t *testing.T) { runDocBlock(t, root, b) })
		}
	}
	t.Logf("ran %d shell examples, skipped %d (each with its reason in the docs)", run, skipped)
	if run == 0 {
		t.Error("no shell example ran")
	}
}

// checkFileBlock checks that block b is the file path, line for line.
func checkFileBlock(t *testing.T, root string, b docBlock, path string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Errorf("%s: <!-- example: file %s -->: %v", b.where, path, err)
		return
	}
	if got, want := trimLines(b.lines), trimLines(strings.Split(string(data), "\n")); !slices.Equal(got, want) {
		t.Errorf("%s: the block is not %s: make them the same\nblock:\n%s\nfile:\n%s", b.where, path, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// serviceAddrs are the loopback addresses a block names for the servers
// of a directive's redis, etcd and zk: the test starts them and puts
// their real addresses in place of these.
var serviceAddrs = map[string]string{"redis": "6379", "etcd": "2379", "zk": "2181"}

// runDocBlock runs one shell block.
func runDocBlock(t *testing.T, root string, b docBlock) {
	var pairs []string // addresses of what was started for the block
	services := strings.NewReplacer()
	starts, gateways := false, 0
	var served []string // the ARGS of each gateway started, in order
	for part := range strings.SplitSeq(b.directive, ";") {
		part = strings.TrimSpace(part)
		name, args, _ := strings.Cut(part, " ")
		argv := strings.Fields(services.Replace(args))
		var addr string
		switch name {
		case "":
			continue
		case "redis":
			addr = redistest.Start(t).Addr
		case "etcd":
			addr = etcdtest.Start(t).Addr
		case "zk":
			addr = zktest.Start(t).Addr
		case "redis-cluster":
			c := redistest.StartCluster(t, 3)
			pairs = append(pairs, "localhost:7000,localhost:7001,localhost:7002", strings.Join(c.Addrs(), ","))
			services = strings.NewReplacer(pairs...)
			continue
		case "redis-sentinel":
			sentinel := redistest.StartSentinel(t, redistest.Start(t), "mymaster")
			pairs = append(pairs, "localhost:26379", sentinel.Addr)
			services = strings.NewReplacer(pairs...)
			continue
		case "starts":
			starts = true
			continue
		case "gateway":
			g := startGateway(t, nil, argv...)
			p, a := hostOf(t, g.proxy), hostOf(t, g.admin)
			port, aport := strconv.Itoa(8080+gateways), strconv.Itoa(9090+gateways)
			pairs = append(pairs, "localhost:"+port, p, "127.0.0.1:"+port, p, "localhost:"+aport, a, "127.0.0.1:"+aport, a)
			gateways++
			served = append(served, "gateway serve "+args)
			continue
		case "rls":
			g := startRLS(t, nil, nil, argv...)
			a := hostOf(t, g.admin)
			pairs = append(pairs, "localhost:9091", a, "127.0.0.1:9091", a)
			continue
		default:
			t.Fatalf("%s: unknown <!-- example: %s -->: use skip: REASON, file PATH, or any of redis, redis-cluster, redis-sentinel, etcd, zk, starts, gateway ARGS, rls ARGS separated by ;", b.where, b.directive)
		}
		port := serviceAddrs[name]
		pairs = append(pairs, "localhost:"+port, addr, "127.0.0.1:"+port, addr)
		services = strings.NewReplacer(pairs...)
	}
	replace := strings.NewReplacer(pairs...)
	if why := unsafeExample(replace.Replace(strings.Join(b.lines, "\n"))); why != "" {
		t.Fatalf("%s: not run: %s; mark it <!-- example: skip: REASON --> or make it local", b.where, why)
	}
	if b.lang != "console" {
		script := replace.Replace(strings.Join(b.lines, "\n"))
		var rest []string
		for i, line := range strings.Split(script, "\n") {
			switch {
			case !isServeCommand(line):
				rest = append(rest, line)
			case starts:
				startServing(t, root, b.where, line)
			default:
				served = checkServed(t, b.where, b.lines[i], served)
			}
		}
		script = strings.Join(rest, "\n")
		out, code := runShell(t, root, script)
		if code != 0 {
			t.Errorf("%s: the block exits %d:\n%s", b.where, code, out)
		}
		return
	}
	type step struct {
		cmd  string
		want []string
	}
	var steps []step
	for i, line := range b.lines {
		cmd, isCmd := strings.CutPrefix(line, "$ ")
		switch {
		case isCmd:
			steps = append(steps, step{cmd: cmd})
		case len(steps) == 0:
			t.Fatalf("%s: line %d of the console block is neither a $ command nor its output: %q", b.where, i+1, line)
		case strings.HasSuffix(steps[len(steps)-1].cmd, "\\") && len(steps[len(steps)-1].want) == 0:
			steps[len(steps)-1].cmd += "\n" + line
		default:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	for _, s := range steps {
		if isServeCommand(s.cmd) && starts {
			startServing(t, root, b.where, replace.Replace(s.cmd))
			continue
		}
		if isServeCommand(s.cmd) {
			served = checkServed(t, b.where, s.cmd, served)
			continue
		}
		out, code := runShell(t, root, replace.Replace(s.cmd))
		if code != 0 {
			t.Errorf("%s: $ %s\nexits %d:\n%s", b.where, s.cmd, code, out)
			continue
		}
		if got := trimLines(strings.Split(out, "\n")); !outputMatches(got, trimLines(s.want)) {
			t.Errorf("%s: $ %s\ngot:\n%s\nwant (… for any text):\n%s", b.where, s.cmd, strings.Join(got, "\n"), strings.Join(trimLines(s.want), "\n"))
		}
	}
}

// isServeCommand reports whether a line of a block starts a gateway or
// gateway rls that serves until stopped.
func isServeCommand(line string) bool {
	f := strings.Fields(line)
	return len(f) >= 2 && f[0] == "gateway" && (f[1] == "serve" || f[1] == "rls")
}

// checkServed checks that a block's serve command line is the next
// gateway its directive started (the test started it, on free ports), and
// returns the gateways left.
func checkServed(t *testing.T, where, line string, served []string) []string {
	t.Helper()
	flat := strings.Join(strings.Fields(strings.ReplaceAll(line, "\\\n", " ")), " ")
	if len(served) == 0 {
		t.Errorf("%s: $ %s\nserves until stopped: start it from the directive (<!-- example: gateway ARGS -->) or mark the block starts", where, line)
		return nil
	}
	if want := strings.Join(strings.Fields(served[0]), " "); !strings.HasPrefix(flat, want) {
		t.Errorf("%s: $ %s\nis not what the directive started: %s", where, line, want)
	}
	return served[1:]
}

// startServing runs the command line of a gateway (serve or rls) that
// serves until stopped, on free loopback ports in place of those it names,
// and waits until it listens; the test stops it.
func startServing(t *testing.T, root, where, line string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+strings.TrimSpace(line)+" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0")
	cmd.Dir = root
	cmd.Env = shellEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &gwtest.Log{}
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		listening := false
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			var rec struct{ Msg, Admin string }
			if !listening && json.Unmarshal(sc.Bytes(), &rec) == nil && (rec.Msg == "gateway listening" || rec.Msg == "gateway rls listening") {
				listening = true
				ready <- rec.Admin
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	select {
	case admin := <-ready:
		// Listening is not enough: a gateway serves under its fail mode
		// with its store unreachable. Its store and rule source must
		// answer. /readyz pings the store with --redis-timeout (25ms by
		// default), which one ping may miss on a loaded machine: the
		// store must answer within 30s.
		var last string
		eventually.True(t, 30*time.Second, func() bool {
			code, body := send(t, "GET", "http://"+admin+"/readyz")
			last = strconv.Itoa(code) + " " + body
			return code == 200 && !strings.Contains(body, `"reachable":false`) && !strings.Contains(body, `"connected":false`)
		}, "%s: $ %s\nlistens, but /readyz answers %v\n%s", where, line, outputOf{&last}, logs)
	case err := <-done:
		t.Fatalf("%s: $ %s\nexits before it listens: %v\n%s", where, line, err, logs)
	case <-time.After(time.Minute):
		t.Fatalf("%s: $ %s\ndoes not listen within a minute\n%s", where, line, logs)
	}
}

var (
	// urlHosts finds the authority of a URL: etcd://a:2379,b:2379/k.
	urlHosts = regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://([^/\s'"]+)`)
	// ipv4s finds IPv4 addresses; one followed by a prefix length is a
	// CIDR, a setting rather than a place to connect to.
	ipv4s = regexp.MustCompile(`\b(\d{1,3}(?:\.\d{1,3}){3})(/\d)?`)
	// outsideCommands reach past this machine's loopback, or change it.
	outsideCommands = regexp.MustCompile(`(^|[\s;&|(])(sudo|docker|docker-compose|kubectl|systemctl|make|ssh|scp)\s`)
)

// unsafeExample returns why script must not run here, or "": it names an
// address other than this machine's loopback (a test may reach nothing
// else), or runs a command that needs more than this machine (Docker,
// Kubernetes, root, make, which builds and runs this very test).
func unsafeExample(script string) string {
	local := func(host string) bool {
		if _, after, ok := strings.Cut(host, "@"); ok {
			host = after
		}
		h := host
		if i := strings.LastIndex(host, ":"); i >= 0 && !strings.HasSuffix(host, "]") {
			h = host[:i]
		}
		h = strings.Trim(h, "[]")
		return h == "localhost" || h == "::1" || strings.HasPrefix(h, "127.") || h == "…" || h == ""
	}
	for _, m := range urlHosts.FindAllStringSubmatch(script, -1) {
		for host := range strings.SplitSeq(m[1], ",") {
			if !local(host) {
				return "it names " + host + ", which is not this machine's loopback"
			}
		}
	}
	for _, m := range ipv4s.FindAllStringSubmatch(script, -1) {
		if m[2] == "" && !strings.HasPrefix(m[1], "127.") {
			return "it names " + m[1] + ", which is not this machine's loopback"
		}
	}
	if m := outsideCommands.FindStringSubmatch(script); m != nil {
		return "it runs " + m[2]
	}
	return ""
}

// runShell runs script with bash from dir, with the built gateway first on
// PATH and without the GATEWAY_* variables of the test's environment, and
// returns what it printed (stdout and stderr) and its exit code.
func runShell(t *testing.T, dir, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = shellEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%q did not finish within 2 minutes:\n%s", script, out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %q: %v", script, err)
	}
	return string(out), 0
}

// shellEnv is the environment of the examples: the test's, with the built
// gateway first on PATH and without GATEWAY_* variables.
func shellEnv() []string {
	env := []string{raceEnv}
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "GATEWAY_"):
		case strings.HasPrefix(kv, "PATH="):
			env = append(env, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+strings.TrimPrefix(kv, "PATH="))
		default:
			env = append(env, kv)
		}
	}
	return env
}

// trimLines drops trailing spaces from each line and trailing empty lines.
func trimLines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " \t\r")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// outputMatches reports whether got is want line for line, "…" in a line
// of want standing for any text.
func outputMatches(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		parts := strings.Split(w, "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got[i]) {
			return false
		}
	}
	return true
}

// cliCommands returns the commands `gateway --help` lists.
func cliCommands(t *testing.T) []string {
	t.Helper()
	code, out, errOut := runBinary(t, "--help")
	if code != 0 {
		t.Fatalf("gateway --help: exit %d %s", code, errOut)
	}
	_, list, ok := strings.Cut(out, "Available Commands:\n")
	if !ok {
		t.Fatalf("gateway --help lists no commands:\n%s", out)
	}
	var cmds []string
	for line := range strings.SplitSeq(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		cmds = append(cmds, f[0])
	}
	return cmds
}

// checkListedCommands checks that each "gateway NAME …" line of a text
// block (the CLI section's list) names a command the binary has.
func checkListedCommands(t *testing.T, b docBlock, commands []string) {
	t.Helper()
	for _, line := range b.lines {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "gateway" || strings.HasPrefix(f[1], "-") {
			continue
		}
		if !slices.Contains(commands, f[1]) {
			t.Errorf("%s: lists `gateway %s`, which is not a command (gateway --help lists %v)", b.where, f[1], commands)
		}
	}
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// TestUnsafeExample checks the guard that keeps TestDocExamples from
// running an example that would reach past this machine.
func TestUnsafeExample(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, script string
		unsafe       bool
	}{
		{"loopback curl", "curl -s localhost:8080/v1/x 127.0.0.1:9090/rules", false},
		{"a loopback URL", "gateway top --admin http://127.0.0.1:9090", false},
		{"a rule file", "gateway validate configs/ratelimiter-rule.yaml", false},
		{"a CIDR", "gateway serve --demo-upstream --trusted-proxies 10.0.0.0/8", false},
		{"etcd elsewhere", "gateway rules get etcd://127.0.0.1:2379,10.0.0.1:2379/gateway/rules", true},
		{"redis by name", "gateway serve --redis-url redis://gateway@redis.internal:6379/0", true},
		{"an address", "gateway serve --redis-addrs 10.0.0.1:7000", true},
		{"a JWKS URL", "--jwt-jwks https://idp.example/.well-known/jwks.json", true},
		{"docker", "docker build -t gateway:latest .", true},
		{"sudo after &&", "make build && sudo install -m 0755 bin/gateway /usr/local/bin/gateway", true},
		{"make", "make run", true},
	}
	for _, tt := range tests {
		if got := unsafeExample(tt.script); (got != "") != tt.unsafe {
			t.Errorf("%s: unsafeExample(%q) = %q, want unsafe %v", tt.name, tt.script, got, tt.unsafe)
		}
	}
}

// TestDocServeFlags checks that the documentation (README.md and
// docs/**/*.md) names every flag of `gateway serve`, as `--flag`.
func TestDocServeFlags(t *testing.T) {
	code, out, errOut := runBinary(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("gateway serve --help: exit %d %s", code, errOut)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var docs strings.Builder
	for _, f := range docFiles(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	flagRE := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)
	n := 0
	for line := range strings.SplitSeq(out, "\n") {
		m := flagRE.FindStringSubmatch(line)
		if m == nil || m[1] == "help" {
			continue
		}
		n++
		if !strings.Contains(docs.String(), "`--"+m[1]+"`") {
			t.Errorf("the documentation does not name `--%s`, a flag of gateway serve", m[1])
		}
	}
	if n < 20 {
		t.Fatalf("found %d flags in gateway serve --help:\n%s", n, out)
	}
}
