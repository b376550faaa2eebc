package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/eventually"
	"github.com/ratelimit-gateway/gateway/internal/tlstest"
)

// TestEndToEndRoutes runs the binary with routes and no --upstream: path
// and host routing, balancing over two targets, mTLS to an upstream, 404
// for a request no route matches, the route in the access log and the
// metrics, /upstreams, and match and validate on routes.
func TestEndToEndRoutes(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	var n1, n2 atomic.Int64
	counted := func(n *atomic.Int64, name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}))
		t.Cleanup(s.Close)
		return s
	}
	u1, u2 := counted(&n1, "users"), counted(&n2, "users")

	// billing speaks mTLS only.
	server, client := tlstest.New(t, 301), tlstest.New(t, 302)
	pair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AddCert(client.Cert)
	billing := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "billing %s %s", r.Proto, r.URL.Path)
	}))
	billing.EnableHTTP2 = true
	billing.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cas}
	billing.StartTLS()
	t.Cleanup(billing.Close)

	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": server.CertPEM, "cert.pem": client.CertPEM, "key.pem": client.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(fmt.Sprintf(`upstreams:
  - name: users
    targets: [%s, %s]
  - name: billing
    targets: [%s]
    tls: {ca: %s, cert: %s, key: %s}
routes:
  - path: /v1/users
    upstream: users
    stripPrefix: true
    name: users
  - host: billing.example.com
    upstream: billing
configs:
  - appId: "*"
    limit: -1
`, u1.URL, u2.URL, billing.URL, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))), 0o644)

	code, out, errOut := runBinary(t, "validate", rules)
	if code != 0 {
		t.Fatalf("validate: exit %d: %s %s", code, out, errOut)
	}
	code, out, _ = runBinary(t, "match", "--config", rules, "--host", "billing.example.com", "/v1/users/1")
	if code != 0 || !strings.Contains(out, "→ upstream billing") {
		t.Errorf("match --host: exit %d:\n%s", code, out)
	}

	accessLog := filepath.Join(dir, "access.log")
	g := startGateway(t, nil, "--config", rules, "--access-log", accessLog, "--ready-upstream", "users,billing")
	// Each request finds both targets idle and goes to one of the two at
	// random (least outstanding requests over two random choices): each
	// target's count is binomial. Of 200 requests, one run in 275 would
	// fall outside half ± 20%; of 1000, one in five billion.
	const requests = 1000
	for i := range requests {
		if code, body := send(t, "GET", g.proxy+"/v1/users/7"); code != 200 || body != "users /7" {
			t.Fatalf("request %d: got %d %q, want 200 from users with the prefix stripped", i, code, body)
		}
	}
	for name, n := range map[string]int64{"first": n1.Load(), "second": n2.Load()} {
		if n < requests/2*4/5 || n > requests/2*6/5 {
			t.Errorf("the %s users target got %d of %d requests, want %d ± 20%%", name, n, requests, requests/2)
		}
	}
	req, _ := http.NewRequest("GET", g.proxy+"/invoices", nil)
	req.Host = "billing.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "billing HTTP/2.0 /invoices" {
		t.Errorf("billing over mTLS: got %d %q, want 200 over HTTP/2", resp.StatusCode, b)
	}
	if code, body := send(t, "GET", g.proxy+"/nowhere"); code != 404 || !strings.Contains(body, "no_route") {
		t.Errorf("no route: got %d %s, want 404 no_route", code, body)
	}
	if code, body := send(t, "GET", g.admin+"/readyz"); code != 200 {
		t.Errorf("readyz: got %d %s", code, body)
	}
	_, ups := send(t, "GET", g.admin+"/upstreams")
	for _, want := range []string{`"name":"users"`, `"name":"billing"`, `"state":"healthy"`, u1.URL} {
		if !strings.Contains(ups, want) {
			t.Errorf("/upstreams lacks %s: %s", want, ups)
		}
	}
	_, metrics := send(t, "GET", g.admin+"/metrics")
	if want := fmt.Sprintf(`gateway_route_requests_total{class="2xx",route="users",upstream="users"} %d`, requests); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
	logData, _ := os.ReadFile(accessLog)
	if !strings.Contains(string(logData), `"route":"users","upstream":"users"`) {
		t.Errorf("the access log does not name the route:\n%.500s", logData)
	}
}

func TestValidateRouteErrors(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`upstreams:
  - name: a
    targets: [http://10.0.0.1:8080]
    tls: {ca: /nonexistent/ca.pem}
routes:
  - path: /
    upstream: b
configs:
  - appId: "*"
    limit: 1
`), 0o644)
	code, _, errOut := runBinary(t, "validate", bad)
	if code != 1 {
		t.Errorf("validate: exit %d, want 1", code)
	}
	for _, want := range []string{"bad.yaml:4: tls is set but the targets are http", "bad.yaml:4: tls ca: open /nonexistent/ca.pem", `bad.yaml:6: route names upstream "b"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate output lacks %q:\n%s", want, errOut)
		}
	}
}

// TestEndToEndReloadPoolsUnderLoad rewrites the rule file, changing the
// pool's targets, while requests flow through the binary: none fails,
// and the last pool serves.
func TestEndToEndReloadPoolsUnderLoad(t *testing.T) {
	t.Parallel()
	if binary == "" {
		t.Skip("-short: the end-to-end tests need the gateway binary")
	}
	var counts [3]atomic.Int64
	var urls [3]string
	for i := range counts {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			counts[i].Add(1)
			io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		urls[i] = s.URL
	}
	rules := func(targets ...int) string {
		var ts []string
		for _, i := range targets {
			ts = append(ts, urls[i])
		}
		return fmt.Sprintf("upstreams: [{name: p, targets: [%s]}]\nroutes: [{path: /, upstream: p}]\nconfigs: [{appId: \"*\", limit: -1}]\n", strings.Join(ts, ", "))
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(rules(0, 1)), 0o644)
	g := startGateway(t, nil, "--config", path)

	stop := make(chan struct{})
	done := make(chan struct{})
	var sent, failed atomic.Int64
	var firstFailure atomic.Value
	// Each client's requests begun and ended, one at a time.
	var begun, ended [4]atomic.Int64
	for c := range begun {
		go func() {
			defer func() { done <- struct{}{} }()
			client := &http.Client{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				begun[c].Add(1)
				resp, err := client.Get(g.proxy + "/x")
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					ended[c].Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ended[c].Add(1)
				if resp.StatusCode != 200 {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
				}
			}
		}()
	}
	// Each edit is in force once /rules shows its digest; requests then
	// flow on the new pool for a while before the next edit.
	for _, targets := range [][]int{{0, 1, 2}, {1}, {2, 0}, {2}} {
		data := rules(targets...)
		sum := sha256.Sum256([]byte(data))
		tmp := path + ".tmp"
		os.WriteFile(tmp, []byte(data), 0o644)
		os.Rename(tmp, path)
		eventually.True(t, 30*time.Second, func() bool {
			_, body := send(t, "GET", g.admin+"/rules")
			return strings.Contains(body, hex.EncodeToString(sum[:]))
		}, "the edit to %v never came into force\n%s", targets, g.logs)
		before := counts[targets[0]].Load()
		eventually.True(t, 30*time.Second, func() bool { return counts[targets[0]].Load() > before+20 },
			"target %d of the pool in force gets no requests", targets[0])
	}
	// Only target 2 is left: the others get no more requests. A request
	// an earlier pool sent to one of them may still be on its way there:
	// once each client has ended a request it began after the last edit
	// came into force, none is.
	var since [len(begun)]int64
	for c := range begun {
		since[c] = begun[c].Load()
	}
	eventually.True(t, 30*time.Second, func() bool {
		for c := range ended {
			if ended[c].Load() <= since[c] {
				return false
			}
		}
		return true
	}, "a client's request is still in flight 30s after the last edit")
	c0, c1 := counts[0].Load(), counts[1].Load()
	before := counts[2].Load()
	eventually.True(t, 30*time.Second, func() bool { return counts[2].Load() > before+50 }, "target 2 gets no requests")
	if counts[0].Load() != c0 || counts[1].Load() != c1 {
		t.Errorf("removed targets still got requests: %d and %d more", counts[0].Load()-c0, counts[1].Load()-c1)
	}
	close(stop)
	for range 4 {
		<-done
	}
	if f := failed.Load(); f != 0 {
		t.Errorf("%d of %d requests failed across the reloads, want none; first: %v", f, sent.Load(), firstFailure.Load())
	}
}
