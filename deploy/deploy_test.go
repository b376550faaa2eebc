package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/server"
	"go.yaml.in/yaml/v3"
)

// serveFlags returns every `gateway serve` flag that cmd/gateway/serve.go
// binds to a field of server.Config, with its default as the flag prints
// it: the field's value in server.DefaultConfig, which seeds the flags.
func serveFlags(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("../cmd/gateway/serve.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`f\.\w*Var\((?:\([\w.*]+\))?\(?&(cfg\.)?(\w+)\)?, "([a-z0-9-]+)",`)
	def := reflect.ValueOf(server.DefaultConfig())
	flags := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		if m[1] == "" {
			// A flag of the command's own (--log-format): known, with a
			// default nothing here reads.
			flags[m[3]] = ""
			continue
		}
		m = []string{m[0], m[2], m[3]}
		v := def.FieldByName(m[1])
		if !v.IsValid() {
			t.Fatalf("serve.go: --%s is bound to cfg.%s, which server.Config lacks", m[2], m[1])
		}
		flags[m[2]] = fmt.Sprint(v.Interface())
	}
	for _, name := range []string{"config", "listen", "admin-listen", "shutdown-timeout", "upstream", "store"} {
		if _, ok := flags[name]; !ok {
			t.Fatalf("serve.go: no --%s flag found (flags: %v)", name, flags)
		}
	}
	return flags
}

// checkAdminReachable fails unless the admin address listens on every
// interface: in a container, the binary's loopback default is out of
// reach of the probes and of Prometheus.
func checkAdminReachable(t *testing.T, where string, e effective) {
	t.Helper()
	addr := e.str(t, "admin-listen")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: --admin-listen %q: %v", where, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s: --admin-listen %s is not on every interface: the probes and Prometheus could not reach it", where, addr)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: port is not a number", addr)
	}
	return n
}

// effective is the serve configuration a deployment runs with: its flags
// (from args and GATEWAY_* environment) over serve.go's defaults.
type effective struct {
	set      map[string]string // flags given explicitly, by name
	defaults map[string]string
}

func (e effective) has(name string) bool { _, ok := e.set[name]; return ok }

func (e effective) str(t *testing.T, name string) string {
	t.Helper()
	if v, ok := e.set[name]; ok {
		return v
	}
	return e.defaults[name]
}

func (e effective) duration(t *testing.T, name string) time.Duration {
	t.Helper()
	if v, ok := e.set[name]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("--%s=%s: %v", name, v, err)
		}
		return d
	}
	d, err := time.ParseDuration(e.defaults[name])
	if err != nil {
		t.Fatalf("--%s default %q: %v", name, e.defaults[name], err)
	}
	return d
}

// parseServe reads `serve` arguments and GATEWAY_* variables into flags,
// failing on unknown flags or variables (arguments win, as in the CLI).
func parseServe(t *testing.T, where string, args []string, env map[string]string, defaults map[string]string) effective {
	t.Helper()
	e := effective{set: map[string]string{}, defaults: defaults}
	for name, v := range env {
		if !strings.HasPrefix(name, "GATEWAY_") {
			continue
		}
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "GATEWAY_")), "_", "-")
		if _, ok := defaults[flag]; !ok {
			t.Errorf("%s: %s names no serve flag", where, name)
		}
		e.set[flag] = v
	}
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: command %q does not start with serve", where, args)
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("%s: unexpected argument %q", where, a)
		}
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		def, known := defaults[name]
		if !known {
			t.Errorf("%s: --%s is not a serve flag", where, name)
		}
		if !ok {
			if def == "true" || def == "false" {
				val = "true"
			} else if i+1 < len(args) {
				i++
				val = args[i]
			}
		}
		e.set[name] = val
	}
	return e
}

// servedEndpoints starts the real gateway with the rules data on loopback
// and reports the status of GET path on its admin port for each path.
func servedEndpoints(t *testing.T, rulesName string, rules []byte, paths ...string) map[string]int {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, rulesName)
	if err := os.WriteFile(file, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.ConfigPath, cfg.Listen, cfg.AdminListen = file, "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream, cfg.ShutdownTimeout = "http://127.0.0.1:1", time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("gateway did not start on the rules: %v", err)
	}
	addr := srv.AdminAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	codes := map[string]int{}
	for _, p := range paths {
		resp, err := http.Get("http://" + addr.String() + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[p] = resp.StatusCode
	}
	return codes
}

// Generic YAML access.

type obj = map[string]any

func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func getObj(v any, keys ...string) obj { m, _ := get(v, keys...).(obj); return m }
func getList(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}
func getStr(v any, keys ...string) string {
	switch x := get(v, keys...).(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func strs(l []any) []string {
	out := make([]string, 0, len(l))
	for _, v := range l {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

func readYAMLDocs(t *testing.T, file string) []obj {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []obj
	for {
		var d obj
		err := dec.Decode(&d)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

// TestBuildScript checks the one build command that the Dockerfile and
// make lint-deploy both run.
func TestBuildScript(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=${VERSION}", "./cmd/gateway"} {
		if !bytes.Contains(src, []byte(want)) {
			t.Errorf("deploy/build.sh does not contain %q", want)
		}
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mk, []byte("deploy/check-build.sh")) {
		t.Error("make lint-deploy does not run deploy/check-build.sh")
	}
}

type instruction struct {
	cmd  string // upper case
	args string
}

// dockerStages splits the Dockerfile into its stages' instructions.
func dockerStages(t *testing.T) [][]instruction {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instruction
	var cur strings.Builder
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before FROM", in.cmd)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(stages))
	}
	return stages
}

func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var l []string
	if err := yaml.Unmarshal([]byte(in.args), &l); err != nil || !strings.HasPrefix(in.args, "[") {
		t.Fatalf("Dockerfile: %s %s is not in exec (JSON) form", in.cmd, in.args)
	}
	return l
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	stages := dockerStages(t)

	build := stages[0]
	var runsScript bool
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "sh deploy/build.sh") && strings.Contains(in.args, "VERSION=$VERSION") {
			runsScript = true
		}
	}
	if !runsScript {
		t.Error("Dockerfile: the build stage does not RUN deploy/build.sh with VERSION=$VERSION (the command make lint-deploy checks)")
	}

	final := stages[len(stages)-1]
	from := final[0].args
	if !strings.Contains(from, "distroless/static") && !strings.HasPrefix(from, "scratch") {
		t.Errorf("Dockerfile: final stage FROM %s, want distroless static or scratch", from)
	}
	var user string
	exposed := map[int]bool{}
	var entrypoint, cmd []string
	copied := map[string]string{} // destination → source
	env := map[string]string{}
	for _, in := range final {
		switch in.cmd {
		case "ENV":
			k, v, _ := strings.Cut(in.args, "=")
			env[k] = v
		case "USER":
			user = in.args
		case "EXPOSE":
			for f := range strings.FieldsSeq(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(f, "/tcp"))
				if err != nil {
					t.Errorf("Dockerfile: EXPOSE %s", f)
				}
				exposed[n] = true
			}
		case "ENTRYPOINT":
			entrypoint = execForm(t, in)
		case "CMD":
			cmd = execForm(t, in)
		case "COPY":
			f := strings.Fields(in.args)
			copied[f[len(f)-1]] = strings.Join(f[:len(f)-1], " ")
		}
	}
	name, _, _ := strings.Cut(user, ":")
	if name == "" || name == "root" || name == "0" {
		t.Errorf("Dockerfile: final stage USER %q, want a non-root user (nonroot, 65532)", user)
	}
	if len(entrypoint) != 1 || !strings.HasPrefix(copied[entrypoint[0]], "--from=") {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want the binary copied from the build stage", entrypoint)
	}
	// /bin/ratelimit, the name envoyproxy/ratelimit's image and Envoy
	// Gateway run: a symlink to the binary made in the build stage.
	var links bool
	for _, in := range build {
		if in.cmd == "RUN" && len(entrypoint) == 1 && strings.Contains(in.args, "ln -s "+entrypoint[0]+" /out/bin/ratelimit") {
			links = true
		}
	}
	if !links || copied["/bin/"] != "--from=build /out/bin/" {
		t.Errorf("Dockerfile: no /bin/ratelimit symlink to the ENTRYPOINT %q copied from the build stage", entrypoint)
	}
	e := parseServe(t, "Dockerfile CMD", cmd, env, flags)
	listen, admin := portOf(t, e.str(t, "listen")), portOf(t, e.str(t, "admin-listen"))
	if len(exposed) != 2 || !exposed[listen] || !exposed[admin] {
		t.Errorf("Dockerfile: EXPOSE %v, want the proxy and admin ports %d and %d", exposed, listen, admin)
	}
	// In ENV, not CMD: a command given to docker run keeps it.
	checkAdminReachable(t, "Dockerfile ENV", e)
	rules := e.str(t, "config")
	if rules != "/etc/gateway/ratelimiter-rule.yaml" {
		t.Errorf("Dockerfile: CMD --config %s, want /etc/gateway/ratelimiter-rule.yaml", rules)
	}
	if copied[rules] != "configs/ratelimiter-rule.yaml" {
		t.Errorf("Dockerfile: %s is not the example rules (COPY configs/ratelimiter-rule.yaml)", rules)
	}
	if slices.ContainsFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "--listen") || strings.HasPrefix(a, "--admin-listen") }) {
		t.Error("Dockerfile: CMD sets the ports; a command given to docker run would lose them (use ENV)")
	}
	checkEnvNames(t, "../Dockerfile", flags)
}

// checkEnvNames fails on every GATEWAY_* name in file that is no serve flag.
func checkEnvNames(t *testing.T, file string, flags map[string]string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`GATEWAY_[A-Z0-9_]*[A-Z0-9]`).FindAllString(string(data), -1) {
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(m, "GATEWAY_")), "_", "-")
		if _, ok := flags[flag]; !ok {
			t.Errorf("%s: %s names no serve flag", file, m)
		}
	}
}

func TestKubernetes(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	files, _ := filepath.Glob("k8s/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests under deploy/k8s")
	}
	byKind := map[string][]obj{}
	var resources []string
	for _, f := range files {
		for _, d := range readYAMLDocs(t, f) {
			kind := getStr(d, "kind")
			if kind == "" {
				t.Errorf("%s: a document without kind", f)
			}
			byKind[kind] = append(byKind[kind], d)
			if kind == "Kustomization" {
				resources = strs(getList(d, "resources"))
			}
		}
	}
	for _, f := range files {
		base := filepath.Base(f)
		listed := slices.Contains(resources, base)
		if !listed && base != "kustomization.yaml" && !strings.Contains(base, ".example.") {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join("k8s", r)); err != nil {
			t.Errorf("kustomization.yaml: %v", err)
		}
	}
	one := func(kind string) obj {
		if len(byKind[kind]) != 1 {
			t.Fatalf("deploy/k8s: %d %s, want 1", len(byKind[kind]), kind)
		}
		return byKind[kind][0]
	}
	dep := one("Deployment")
	spec := getObj(dep, "spec")
	pod := getObj(spec, "template", "spec")
	if r, _ := spec["replicas"].(int); r != 3 {
		t.Errorf("Deployment: replicas %v, want 3", spec["replicas"])
	}
	podLabels := getObj(spec, "template", "metadata", "labels")
	matches := func(what string, sel obj) {
		if len(sel) == 0 {
			t.Errorf("%s: empty selector", what)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("%s: selector %s=%v does not match the pod labels %v", what, k, v, podLabels)
			}
		}
	}
	matches("Deployment", getObj(spec, "selector", "matchLabels"))
	matches("Service", getObj(one("Service"), "spec", "selector"))
	matches("PodDisruptionBudget", getObj(one("PodDisruptionBudget"), "spec", "selector", "matchLabels"))

	containers := getList(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(containers))
	}
	c := containers[0]
	env := map[string]string{}
	for _, ev := range getList(c, "env") {
		name := getStr(ev, "name")
		if ref := getObj(ev, "valueFrom", "secretKeyRef"); ref != nil {
			env[name] = "secret:" + getStr(ref, "name") + "/" + getStr(ref, "key")
		} else if get(ev, "valueFrom") != nil {
			env[name] = "ref"
		} else {
			env[name] = getStr(ev, "value")
		}
	}
	args := strs(getList(c, "args"))
	e := parseServe(t, "Deployment", args, env, flags)

	// Ports: the container's match --listen and --admin-listen.
	checkAdminReachable(t, "Deployment", e)
	listen, admin := portOf(t, e.str(t, "listen")), portOf(t, e.str(t, "admin-listen"))
	named := map[string]int{}
	var ports []int
	for _, p := range getList(c, "ports") {
		n, _ := get(p, "containerPort").(int)
		named[getStr(p, "name")] = n
		ports = append(ports, n)
	}
	slices.Sort(ports)
	if want := []int{min(listen, admin), max(listen, admin)}; !slices.Equal(ports, want) {
		t.Errorf("Deployment: container ports %v, want --listen and --admin-listen %v", ports, want)
	}
	resolve := func(v any) int {
		if s, ok := v.(string); ok {
			if n, ok := named[s]; ok {
				return n
			}
			t.Errorf("Deployment: no container port named %q", s)
		}
		n, _ := v.(int)
		return n
	}
	for _, sp := range getList(one("Service"), "spec", "ports") {
		if p := resolve(get(sp, "targetPort")); p != listen {
			t.Errorf("Service: targetPort %d, want the proxy port %d", p, listen)
		}
	}

	// Probes: the admin endpoints on the admin port.
	probes := map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
	for probe, want := range probes {
		hg := getObj(c, probe, "httpGet")
		if hg == nil {
			t.Errorf("Deployment: no %s.httpGet", probe)
			continue
		}
		if p := getStr(hg, "path"); p != want {
			t.Errorf("Deployment: %s path %s, want %s", probe, p, want)
		}
		if p := resolve(hg["port"]); p != admin {
			t.Errorf("Deployment: %s port %d, want the admin port %d", probe, p, admin)
		}
	}

	// Prometheus annotations on the pod.
	ann := getObj(spec, "template", "metadata", "annotations")
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(admin) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("Deployment: prometheus.io annotations %v, want scrape true, port %d, path /metrics", ann, admin)
	}

	// Graceful termination longer than the preStop sleep and the drain.
	grace, _ := pod["terminationGracePeriodSeconds"].(int)
	sleep, _ := get(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	drain := e.duration(t, "shutdown-timeout")
	if time.Duration(grace)*time.Second <= time.Duration(sleep)*time.Second+drain {
		t.Errorf("Deployment: terminationGracePeriodSeconds %d is not longer than preStop %ds + --shutdown-timeout %s", grace, sleep, drain)
	}

	// Security.
	if get(pod, "securityContext", "runAsNonRoot") != true && get(c, "securityContext", "runAsNonRoot") != true {
		t.Error("Deployment: runAsNonRoot is not true")
	}
	if get(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("Deployment: readOnlyRootFilesystem is not true")
	}
	if get(c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("Deployment: allowPrivilegeEscalation is not false")
	}
	for _, k := range []string{"requests", "limits"} {
		if getObj(c, "resources", k) == nil {
			t.Errorf("Deployment: no resources.%s", k)
		}
	}

	// Rules: a ConfigMap mounted as a directory holding --config.
	rulesPath := e.str(t, "config")
	var cmName string
	for _, m := range getList(c, "volumeMounts") {
		if getStr(m, "mountPath") != path.Dir(rulesPath) {
			continue
		}
		if get(m, "subPath") != nil || get(m, "subPathExpr") != nil {
			t.Errorf("Deployment: the rules are mounted with subPath, which Kubernetes never updates")
		}
		for _, v := range getList(pod, "volumes") {
			if getStr(v, "name") == getStr(m, "name") {
				cmName = getStr(v, "configMap", "name")
			}
		}
	}
	if cmName == "" {
		t.Fatalf("Deployment: no ConfigMap volume mounted at %s, the directory of --config %s", path.Dir(rulesPath), rulesPath)
	}
	var rules string
	for _, cm := range byKind["ConfigMap"] {
		if getStr(cm, "metadata", "name") == cmName {
			rules = getStr(cm, "data", path.Base(rulesPath))
		}
	}
	if rules == "" {
		t.Fatalf("ConfigMap %s has no key %s (--config %s)", cmName, path.Base(rulesPath), rulesPath)
	}
	if _, err := config.Parse(path.Base(rulesPath), []byte(rules)); err != nil {
		t.Fatalf("ConfigMap %s: the rules do not validate:\n%v", cmName, err)
	}
	// The probes' and the scrape's endpoints, served by the real gateway on these rules.
	codes := servedEndpoints(t, path.Base(rulesPath), []byte(rules), "/readyz", "/healthz", "/metrics")
	for p, code := range codes {
		if code != http.StatusOK {
			t.Errorf("the gateway answers GET %s on the admin port with %d, want 200", p, code)
		}
	}

	// Redis: URL and password from a Secret, never in the manifests.
	if e.str(t, "store") != "redis" {
		t.Errorf("Deployment: --store %s, want redis for a fleet of 3", e.str(t, "store"))
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--redis-url") || strings.HasPrefix(a, "--redis-password") {
			t.Errorf("Deployment: %s in args; take it from the Secret", a)
		}
	}
	secretKeys := map[string]bool{}
	for _, s := range byKind["Secret"] {
		for k := range getObj(s, "stringData") {
			secretKeys["secret:"+getStr(s, "metadata", "name")+"/"+k] = true
		}
	}
	for _, name := range []string{"GATEWAY_REDIS_URL", "GATEWAY_REDIS_PASSWORD"} {
		ref := env[name]
		if !strings.HasPrefix(ref, "secret:") {
			t.Errorf("Deployment: %s does not come from a Secret (%q)", name, ref)
		} else if !secretKeys[ref] {
			t.Errorf("Deployment: %s comes from %s, which secret.example.yaml does not show", name, ref)
		}
	}
}

func TestCompose(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	docs := readYAMLDocs(t, "docker-compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("docker-compose.yaml: %d documents", len(docs))
	}
	services := getObj(docs[0], "services")
	for _, want := range []string{"gateway-1", "gateway-2", "redis", "upstream", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("docker-compose.yaml: no service %s", want)
		}
	}
	// mounts returns a service's bind mounts: container path → host path
	// (relative to deploy/).
	mounts := func(svc string) map[string]string {
		m := map[string]string{}
		for _, v := range strs(getList(services, svc, "volumes")) {
			f := strings.Split(v, ":")
			if len(f) >= 2 && strings.HasPrefix(f[0], ".") {
				m[f[1]] = f[0]
			}
		}
		return m
	}
	var targets []string
	for _, gw := range []string{"gateway-1", "gateway-2"} {
		env := map[string]string{}
		for k, v := range getObj(services, gw, "environment") {
			env[k] = fmt.Sprint(v)
		}
		e := parseServe(t, gw, strs(getList(services, gw, "command")), env, flags)
		checkAdminReachable(t, gw, e)
		if e.str(t, "store") != "redis" || !strings.Contains(e.str(t, "redis-url"), "//redis:") {
			t.Errorf("%s: not on the shared Redis (--store %s --redis-url %s)", gw, e.str(t, "store"), e.str(t, "redis-url"))
		}
		if !strings.Contains(e.str(t, "upstream"), "//upstream:") {
			t.Errorf("%s: --upstream %s is not the upstream service", gw, e.str(t, "upstream"))
		}
		rulesPath := e.str(t, "config")
		host, ok := mounts(gw)[path.Dir(rulesPath)]
		if !ok {
			t.Errorf("%s: the directory of --config %s is not a bind mount (a single-file mount misses editors' rename-over saves)", gw, rulesPath)
			continue
		}
		if fi, err := os.Stat(host); err != nil || !fi.IsDir() {
			t.Errorf("%s: %s is not a directory", gw, host)
		}
		if _, err := config.Load(filepath.Join(host, path.Base(rulesPath))); err != nil {
			t.Errorf("%s: the mounted rules do not validate: %v", gw, err)
		}
		targets = append(targets, gw+":"+strconv.Itoa(portOf(t, e.str(t, "admin-listen"))))
	}

	// Prometheus scrapes both gateways' admin ports.
	var promConfig string
	for _, a := range strs(getList(services, "prometheus", "command")) {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			promConfig = v
		}
	}
	host, ok := mounts("prometheus")[promConfig]
	if !ok {
		t.Fatalf("prometheus: --config.file %q is not mounted from deploy/", promConfig)
	}
	prom := readYAMLDocs(t, host)[0]
	var scraped []string
	for _, sc := range getList(prom, "scrape_configs") {
		for _, st := range getList(sc, "static_configs") {
			scraped = append(scraped, strs(getList(st, "targets"))...)
		}
	}
	for _, target := range targets {
		if !slices.Contains(scraped, target) {
			t.Errorf("%s: does not scrape %s (targets %v)", host, target, scraped)
		}
	}
	for _, rf := range strs(getList(prom, "rule_files")) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(host), rf)); err != nil {
			t.Errorf("%s: rule file: %v", host, err)
		}
	}

	// Grafana gets the dashboard through file provisioning.
	provisioning := mounts("grafana")["/etc/grafana/provisioning"]
	if provisioning == "" {
		t.Fatal("grafana: /etc/grafana/provisioning is not mounted")
	}
	dashFiles, _ := filepath.Glob(filepath.Join(provisioning, "dashboards", "*.yaml"))
	var dashDir string
	for _, f := range dashFiles {
		for _, p := range getList(readYAMLDocs(t, f)[0], "providers") {
			dashDir = getStr(p, "options", "path")
		}
	}
	if src := mounts("grafana")[dashDir]; src == "" {
		t.Errorf("grafana: the provisioned dashboards path %q is not mounted", dashDir)
	} else if js, _ := filepath.Glob(filepath.Join(src, "*.json")); len(js) == 0 {
		t.Errorf("grafana: no dashboard in %s", src)
	}
	checkEnvNames(t, "docker-compose.yaml", flags)
}

func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	data, err := os.ReadFile("systemd/gateway.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string][]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = append(unit[k], v)
		}
	}
	last := func(k string) string {
		if v := unit[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	start := strings.Fields(last("ExecStart"))
	if len(start) < 2 || start[0] != "/usr/local/bin/gateway" {
		t.Fatalf("ExecStart=%s, want /usr/local/bin/gateway serve ...", last("ExecStart"))
	}
	e := parseServe(t, "gateway.service", start[1:], nil, flags)
	if e.str(t, "config") != "/etc/gateway/ratelimiter-rule.yaml" {
		t.Errorf("ExecStart: --config %s", e.str(t, "config"))
	}
	if last("ExecReload") != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%s, want SIGHUP (reloads the rules)", last("ExecReload"))
	}
	stop, err := time.ParseDuration(last("TimeoutStopSec"))
	if err != nil || stop <= e.duration(t, "shutdown-timeout") {
		t.Errorf("TimeoutStopSec=%s is not longer than --shutdown-timeout %s", last("TimeoutStopSec"), e.duration(t, "shutdown-timeout"))
	}
	if u := last("User"); (u == "" || u == "root") && last("DynamicUser") != "yes" {
		t.Error("the unit runs as root: set DynamicUser=yes or User=")
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
		"ProtectControlGroups": "yes", "MemoryDenyWriteExecute": "yes", "LockPersonality": "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "CapabilityBoundingSet": "",
		"Restart": "on-failure", "EnvironmentFile": "-/etc/gateway/gateway.env",
	} {
		if v, ok := unit[k]; !ok || last(k) != want {
			t.Errorf("%s=%q, want %q", k, v, want)
		}
	}
	if !slices.Contains(unit["SystemCallFilter"], "@system-service") {
		t.Error("no SystemCallFilter=@system-service")
	}
}
