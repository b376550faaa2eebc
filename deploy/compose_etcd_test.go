package deploy

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/rulesctl"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

// TestComposeEtcdProfile checks the Compose file's etcd profile: only
// there, an etcd, the push of a rule file that the gateways would accept
// to the key they read, and gateways that start once it succeeded.
func TestComposeEtcdProfile(t *testing.T) {
	t.Parallel()
	flags := serveFlags(t)
	services := getObj(readYAMLDocs(t, "docker-compose.yaml")[0], "services")
	profiled := []string{"etcd", "rules-push", "gateway-etcd-1", "gateway-etcd-2"}
	for name, svc := range services {
		in := slices.Contains(strs(getList(svc, "profiles")), "etcd")
		if in != slices.Contains(profiled, name) {
			t.Errorf("%s: in the etcd profile %v, want %v", name, in, !in)
		}
		if !in {
			for dep := range getObj(svc, "depends_on") {
				if slices.Contains(profiled, dep) {
					t.Errorf("%s (no profile) depends on %s of the etcd profile", name, dep)
				}
			}
		}
	}

	push := strs(getList(services, "rules-push", "command"))
	var args []string
	for _, a := range push {
		if !strings.HasPrefix(a, "--") { // flags are written --name=value
			args = append(args, a)
		}
	}
	if len(args) != 4 || args[0] != "rules" || args[1] != "push" {
		t.Fatalf("rules-push: command %q, want rules push SOURCE FILE", push)
	}
	spec, file := args[2], args[3]
	if !strings.HasPrefix(spec, "etcd://etcd:") {
		t.Errorf("rules-push: %s is not the etcd service", spec)
	}
	host := ""
	for _, v := range strs(getList(services, "rules-push", "volumes")) {
		if f := strings.Split(v, ":"); len(f) >= 2 && f[1] == path.Dir(file) {
			host = f[0]
		}
	}
	if host == "" {
		t.Fatalf("rules-push: the directory of %s is not mounted", file)
	}
	data, err := os.ReadFile(filepath.Join(host, path.Base(file)))
	if err != nil {
		t.Fatal(err)
	}
	_, key, _, err := source.ParseEtcdURL(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rulesctl.CheckFile(key, file, data, 0); err != nil {
		t.Errorf("rules-push: the gateways would refuse %s: %v", file, err)
	}

	for _, gw := range []string{"gateway-etcd-1", "gateway-etcd-2"} {
		env := map[string]string{}
		for k, v := range getObj(services, gw, "environment") {
			env[k] = getStr(v)
		}
		e := parseServe(t, gw, strs(getList(services, gw, "command")), env, flags)
		if got := e.str(t, "config"); got != spec {
			t.Errorf("%s: --config %s, want %s, which rules-push writes", gw, got, spec)
		}
		if !e.has("rules-cache") {
			t.Errorf("%s: no --rules-cache: it could not restart while etcd is down", gw)
		}
		if c := getStr(services, gw, "depends_on", "rules-push", "condition"); c != "service_completed_successfully" {
			t.Errorf("%s: starts on rules-push %q, want once it succeeded", gw, c)
		}
	}
}
