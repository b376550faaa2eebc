package deploy

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dockerignored reports whether the build context leaves p out under the
// .dockerignore patterns: the last pattern that matches p or a directory
// above it decides, a "!" pattern putting it back (Docker's rules, with
// filepath.Match patterns, which are all this file uses).
func dockerignored(t *testing.T, patterns []string, p string) bool {
	t.Helper()
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = path.Clean(strings.TrimPrefix(pat, "!"))
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			ok, err := path.Match(pat, q)
			if err != nil {
				t.Fatalf(".dockerignore: pattern %q: %v", pat, err)
			}
			if ok {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

// TestDockerignore checks that the build context holds what the
// Dockerfile copies and leaves out the repository's history, binaries,
// benchmark results and docs.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore: the whole repository (.git included) would be sent as the build context: %v", err)
	}
	var patterns []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	var copied []string
	for _, stage := range dockerStages(t) {
		for _, in := range stage {
			if in.cmd != "COPY" || strings.Contains(in.args, "--from=") {
				continue
			}
			f := strings.Fields(in.args)
			copied = append(copied, f[:len(f)-1]...)
		}
	}
	if len(copied) == 0 {
		t.Fatal("Dockerfile: no COPY from the build context")
	}
	for _, src := range copied {
		src = path.Clean(strings.TrimSuffix(src, "/"))
		if dockerignored(t, patterns, src) {
			t.Errorf(".dockerignore leaves out %s, which the Dockerfile copies", src)
		}
		// Inside a copied directory, a file is in the context too.
		if fi, err := os.Stat(filepath.Join("..", src)); err == nil && fi.IsDir() {
			if dockerignored(t, patterns, src+"/x.go") {
				t.Errorf(".dockerignore leaves out the files of %s, which the Dockerfile copies", src)
			}
		}
	}
	for _, p := range []string{".git", ".git/config", "bin/gateway", "bench/results/x.md", "docs/replay-report.png", "deploy/k8s/secret.example.yaml", "rules.local.yaml"} {
		if !dockerignored(t, patterns, p) {
			t.Errorf(".dockerignore sends %s in the build context", p)
		}
	}
}

// writablePaths returns the directories a systemd unit with
// ProtectSystem=strict may write to: its Logs-, State-, Cache- and
// RuntimeDirectory, ReadWritePaths, and /tmp with PrivateTmp.
func writablePaths(unit map[string][]string) []string {
	var dirs []string
	for key, base := range map[string]string{"LogsDirectory": "/var/log/", "StateDirectory": "/var/lib/", "CacheDirectory": "/var/cache/", "RuntimeDirectory": "/run/"} {
		for _, v := range unit[key] {
			for d := range strings.FieldsSeq(v) {
				dirs = append(dirs, base+d)
			}
		}
	}
	for _, v := range unit["ReadWritePaths"] {
		dirs = append(dirs, strings.Fields(v)...)
	}
	if v := unit["PrivateTmp"]; len(v) > 0 && v[len(v)-1] == "yes" {
		dirs = append(dirs, "/tmp")
	}
	return dirs
}

// TestSystemdWritablePaths checks that under ProtectSystem=strict every
// file the unit tells operators to have the gateway write (its comments'
// GATEWAY_ACCESS_LOG and GATEWAY_RULES_CACHE) is in a directory the unit
// makes writable, and that TimeoutStopSec covers the drain delay and the
// drain.
func TestSystemdWritablePaths(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	data, err := os.ReadFile("systemd/gateway.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string][]string{}
	var suggested []string // paths in the comments' GATEWAY_*=/path
	assign := regexp.MustCompile(`\b(GATEWAY_(?:ACCESS_LOG|RULES_CACHE))=(/\S+)`)
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		for _, m := range assign.FindAllStringSubmatch(line, -1) {
			suggested = append(suggested, m[1]+"="+m[2])
		}
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = append(unit[k], v)
		}
	}
	if got := unit["ProtectSystem"]; len(got) == 0 || got[len(got)-1] != "strict" {
		t.Fatalf("ProtectSystem=%v: this test is about strict", got)
	}
	writable := writablePaths(unit)
	if len(unit["LogsDirectory"]) == 0 {
		t.Errorf("no LogsDirectory=: --access-log to a file fails under ProtectSystem=strict (writable: %v)", writable)
	}
	var logSuggested bool
	for _, s := range suggested {
		name, p, _ := strings.Cut(s, "=")
		logSuggested = logSuggested || name == "GATEWAY_ACCESS_LOG"
		ok := false
		for _, d := range writable {
			ok = ok || strings.HasPrefix(p, d+"/")
		}
		if !ok {
			t.Errorf("the unit suggests %s, outside the directories it makes writable %v", s, writable)
		}
	}
	if !logSuggested {
		t.Error("the unit's comments do not say where the access log may go (GATEWAY_ACCESS_LOG=/var/log/…)")
	}
	stop, err := time.ParseDuration(unit["TimeoutStopSec"][len(unit["TimeoutStopSec"])-1])
	if err != nil {
		t.Fatal(err)
	}
	drain, _ := time.ParseDuration(flags["shutdown-timeout"])
	delay, err := time.ParseDuration(flags["drain-delay"])
	if err != nil {
		t.Fatalf("--drain-delay default %q: %v", flags["drain-delay"], err)
	}
	if stop <= drain+delay {
		t.Errorf("TimeoutStopSec=%s does not cover --drain-delay %s + --shutdown-timeout %s", stop, delay, drain)
	}
}

// quantity parses a Kubernetes memory quantity (512Mi, 1Gi) or a
// GOMEMLIMIT value (435MiB, 1GiB, bytes) into bytes.
func quantity(t *testing.T, s string) float64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", s, err)
			}
			return v * u.mult
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", s, err)
	}
	return v
}

// TestKubernetesMemoryHeadroom checks that GOMEMLIMIT leaves the container
// headroom under its memory limit: equal to the limit, the GC's overshoot
// and the memory outside the Go heap get the pod OOM-killed.
func TestKubernetesMemoryHeadroom(t *testing.T) {
	t.Parallel()
	var c obj
	for _, d := range readYAMLDocs(t, "k8s/deployment.yaml") {
		if getStr(d, "kind") == "Deployment" {
			if l := getList(d, "spec", "template", "spec", "containers"); len(l) == 1 {
				c, _ = l[0].(obj)
			}
		}
	}
	if c == nil {
		t.Fatal("deployment.yaml: no Deployment with one container")
	}
	limit := getStr(c, "resources", "limits", "memory")
	if limit == "" {
		t.Fatal("Deployment: no memory limit")
	}
	var gomem string
	for _, ev := range getList(c, "env") {
		if getStr(ev, "name") == "GOMEMLIMIT" {
			if get(ev, "valueFrom") != nil {
				t.Fatalf("GOMEMLIMIT comes from %v: a resourceFieldRef is the whole limit, with no headroom", get(ev, "valueFrom"))
			}
			gomem = getStr(ev, "value")
		}
	}
	if gomem == "" {
		t.Fatal("Deployment: no GOMEMLIMIT")
	}
	ratio := quantity(t, gomem) / quantity(t, limit)
	if ratio < 0.7 || ratio > 0.9 {
		t.Errorf("GOMEMLIMIT %s is %.0f%% of the memory limit %s, want 70–90%%", gomem, 100*ratio, limit)
	}
}

// TestComposeHealthAndBuild checks that the Compose file builds the
// gateway image once and reuses it, that the gateways and Redis have
// health checks run with what their images hold, and that what depends
// on them waits until they are healthy.
func TestComposeHealthAndBuild(t *testing.T) {
	t.Parallel()
	services := getObj(readYAMLDocs(t, "docker-compose.yaml")[0], "services")
	var image string
	for _, in := range dockerStages(t)[len(dockerStages(t))-1] {
		if in.cmd == "ENTRYPOINT" {
			image = execForm(t, in)[0]
		}
	}
	var builders []string
	for name := range services {
		if get(services, name, "build") == nil {
			continue
		}
		builders = append(builders, name)
		if getStr(services, name, "image") != "gateway:latest" {
			t.Errorf("%s builds an image it does not name gateway:latest", name)
		}
		if get(services, name, "profiles") != nil {
			t.Errorf("%s, the one that builds the image, is in a profile: without it the image is not built", name)
		}
	}
	if len(builders) != 1 {
		t.Errorf("services that build the gateway image: %v, want one (the others reuse gateway:latest)", builders)
	}
	healthy := func(name string) []string {
		test := strs(getList(services, name, "healthcheck", "test"))
		if len(test) < 2 || test[0] != "CMD" {
			t.Errorf("%s: healthcheck test %q, want an exec form [\"CMD\", …]", name, test)
			return nil
		}
		return test[1:]
	}
	for name := range services {
		if getStr(services, name, "image") != "gateway:latest" || strs(getList(services, name, "command"))[0] != "serve" {
			continue
		}
		if cmd := healthy(name); len(cmd) < 2 || cmd[0] != image || cmd[1] != "health" {
			t.Errorf("%s: healthcheck runs %q, want %s health (the image has no shell or curl)", name, cmd, image)
		}
	}
	if cmd := healthy("redis"); len(cmd) == 0 || cmd[0] != "redis-cli" {
		t.Errorf("redis: healthcheck runs %q, want redis-cli ping", cmd)
	}
	waits := func(who, on string) {
		if c := getStr(services, who, "depends_on", on, "condition"); c != "service_healthy" {
			t.Errorf("%s: depends on %s with condition %q, want service_healthy", who, on, c)
		}
	}
	for _, gw := range []string{"gateway-1", "gateway-2", "gateway-etcd-1", "gateway-etcd-2"} {
		waits(gw, "redis")
	}
	waits("lb", "gateway-1")
	waits("lb", "gateway-2")
	waits("rules-push", "etcd")
}
