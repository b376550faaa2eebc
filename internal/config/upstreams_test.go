package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const routesYAML = `upstreams:
  - name: users
    balancing: round-robin
    targets:
      - http://10.0.0.1:8080/api
      - {url: "http://10.0.0.2:8080/api/", weight: 3}
    healthCheck: {path: /healthz, interval: 5s, timeout: 1s, healthy: 1, unhealthy: 2}
  - name: billing
    targets: [https://billing.internal:8443]
routes:
  - host: Admin.Example.com
    upstream: billing
  - host: "*.example.com"
    path: /v1/
    upstream: users
    stripPrefix: true
    timeout: 30s
    name: wild
configs:
  - appId: "*"
    limit: 10
`

const routesJSON = `{
  "upstreams": [
    {"name": "users", "balancing": "round-robin",
     "targets": ["http://10.0.0.1:8080/api", {"url": "http://10.0.0.2:8080/api/", "weight": 3}],
     "healthCheck": {"path": "/healthz", "interval": "5s", "timeout": "1s", "healthy": 1, "unhealthy": 2}},
    {"name": "billing", "targets": ["https://billing.internal:8443"]}
  ],
  "routes": [
    {"host": "Admin.Example.com", "upstream": "billing"},
    {"host": "*.example.com", "path": "/v1/", "upstream": "users", "stripPrefix": true, "timeout": "30s", "name": "wild"}
  ],
  "configs": [{"appId": "*", "limit": 10}]
}`

const routesXML = `<rules>
  <upstream name="users" balancing="round-robin">
    <target url="http://10.0.0.1:8080/api"/>
    <target url="http://10.0.0.2:8080/api/" weight="3"/>
    <healthCheck path="/healthz" interval="5s" timeout="1s" healthy="1" unhealthy="2"/>
  </upstream>
  <upstream name="billing"><target url="https://billing.internal:8443"/></upstream>
  <route host="Admin.Example.com" upstream="billing"/>
  <route host="*.example.com" path="/v1/" upstream="users" stripPrefix="true" timeout="30s" name="wild"/>
  <config appId="*" limit="10"/>
</rules>`

func TestRoutesInEveryFormat(t *testing.T) {
	t.Parallel()
	type target struct {
		url    string
		weight int
	}
	type summary struct {
		upstreams []string
		targets   [][]target
		balancing []string
		health    HealthCheck
		routes    []Route
	}
	sum := func(r *Rules) summary {
		var s summary
		for _, u := range r.Upstreams {
			s.upstreams = append(s.upstreams, u.Name)
			s.balancing = append(s.balancing, u.Balancing)
			var ts []target
			for _, t := range u.Targets {
				ts = append(ts, target{t.URL.String(), t.Weight})
			}
			s.targets = append(s.targets, ts)
			if u.HealthCheck != nil {
				s.health = *u.HealthCheck
				s.health.Line = 0
			}
		}
		for _, rt := range r.Routes {
			rt.Line = 0
			s.routes = append(s.routes, rt)
		}
		return s
	}
	want := summary{
		upstreams: []string{"users", "billing"},
		targets: [][]target{
			{{"http://10.0.0.1:8080/api", 1}, {"http://10.0.0.2:8080/api", 3}},
			{{"https://billing.internal:8443", 1}},
		},
		balancing: []string{BalanceRoundRobin, BalanceLeastRequest},
		health:    HealthCheck{Path: "/healthz", Interval: 5 * time.Second, Timeout: time.Second, Healthy: 1, Unhealthy: 2},
		routes: []Route{
			{Name: "admin.example.com/", Host: "admin.example.com", Path: "/", Upstream: "billing"},
			{Name: "wild", Host: "*.example.com", Path: "/v1", Upstream: "users", StripPrefix: true, Timeout: 30 * time.Second},
		},
	}
	for _, f := range []struct{ name, data string }{{"r.yaml", routesYAML}, {"r.json", routesJSON}, {"r.xml", routesXML}} {
		r, err := Parse(f.name, []byte(f.data))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got := sum(r); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", f.name, got, want)
		}
	}
}

func TestRouteErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	const tail = "configs: [{appId: \"*\", limit: 1}]\n"
	tests := []struct {
		name string
		data string
		want []wantErr
	}{
		{name: "unknown upstream", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - path: /\n    upstream: b\n" + tail,
			want: []wantErr{{3, `route names upstream "b", which is not defined; the upstreams are a`}}},
		{name: "duplicate route", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - {path: \"/v1/{id}\", upstream: a}\n  - {path: \"/v1/{x}/\", upstream: a}\n" + tail,
			want: []wantErr{{4, "a route for /v1/{x} is already defined at line 3"}}},
		{name: "same path on another host", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - {path: /v1, upstream: a}\n  - {path: /v1, upstream: a, host: a.b}\n" + tail},
		{name: "bad target URL", data: "upstreams:\n  - name: a\n    targets:\n      - 10.0.0.1:8080\n" + tail,
			want: []wantErr{{4, "the URL has no scheme; write it like http://10.0.0.1:8080"}}},
		{name: "mixed schemes", data: "upstreams:\n  - name: a\n    targets: [http://x, https://y]\n" + tail,
			want: []wantErr{{3, "another scheme or path"}}},
		{name: "tls file that does not load", data: "upstreams:\n  - name: a\n    targets: [https://x]\n    tls:\n      ca: " + notPEM + "\n" + tail,
			want: []wantErr{{5, "holds no PEM certificate"}}},
		{name: "tls missing file", data: "upstreams:\n  - name: a\n    targets: [https://x]\n    tls: {cert: /nonexistent/c.pem, key: /nonexistent/k.pem}\n" + tail,
			want: []wantErr{{4, "do not load"}}},
		{name: "tls file that is not a regular file", data: "upstreams:\n  - name: a\n    targets: [https://x]\n    tls: {ca: /dev/zero}\n" + tail,
			want: []wantErr{{4, "/dev/zero is not a regular file"}}},
		{name: "tls on http", data: "upstreams:\n  - name: a\n    targets: [http://x]\n    tls: {serverName: x}\n" + tail,
			want: []wantErr{{4, "the targets are http"}}},
		{name: "h2c targets", data: "upstreams:\n  - name: a\n    targets: [h2c://x:50051, H2C://y:50051]\n" + tail},
		{name: "tls on h2c", data: "upstreams:\n  - name: a\n    targets: [h2c://x]\n    tls: {serverName: x}\n" + tail,
			want: []wantErr{{4, "tls is set but the targets are h2c; use https targets, or remove tls"}}},
		{name: "h2c beside http", data: "upstreams:\n  - name: a\n    targets: [http://x, h2c://y]\n" + tail,
			want: []wantErr{{3, "another scheme or path"}}},
		{name: "unknown scheme", data: "upstreams:\n  - name: a\n    targets: [grpc://x]\n" + tail,
			want: []wantErr{{3, "the scheme must be http, https or h2c"}}},
		{name: "weight", data: "upstreams:\n  - name: a\n    targets: [{url: http://x, weight: 0}]\n" + tail,
			want: []wantErr{{3, "weight 0 is outside 1..1000"}}},
		{name: "balancing", data: "upstreams:\n  - name: a\n    balancing: random\n    targets: [http://x]\n" + tail,
			want: []wantErr{{3, `balancing "random" is not known`}}},
		{name: "duplicate upstream", data: "upstreams:\n  - {name: a, targets: [http://x]}\n  - {name: a, targets: [http://y]}\n" + tail,
			want: []wantErr{{3, `upstream "a" is already defined at line 2`}}},
		{name: "wildcard in the middle", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - {host: a.*.com, upstream: a}\n" + tail,
			want: []wantErr{{3, "a wildcard is only allowed as the first label"}}},
		{name: "host with port", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - {host: a.com:80, upstream: a}\n" + tail,
			want: []wantErr{{3, "without a port"}}},
		{name: "timeout without unit", data: "upstreams: [{name: a, targets: [http://x]}]\nroutes:\n  - {path: /, upstream: a, timeout: 30}\n" + tail,
			want: []wantErr{{3, `timeout 30 has no time unit; write a duration like "30s"`}}},
		{name: "health timeout over interval", data: "upstreams:\n  - name: a\n    targets: [http://x]\n    healthCheck: {interval: 1s, timeout: 2s}\n" + tail,
			want: []wantErr{{4, "longer than its interval"}}},
		{name: "route without upstream", data: "routes:\n  - path: /\n" + tail,
			want: []wantErr{{2, "this route has no upstream"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("rules.yaml", []byte(tt.data))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			checkErrors(t, err, tt.want)
		})
	}
}

func TestRouteErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	_, err := Parse("/etc/gateway/rules.yaml", []byte("upstreams: [{name: a, targets: [ftp://x]}]\nconfigs: [{appId: \"*\", limit: 1}]\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "/etc/gateway/rules.yaml:1: ") {
		t.Errorf("got %v, want a file:line error", err)
	}
}

func TestOutlier(t *testing.T) {
	t.Parallel()
	defaults := Outlier{Failures: 2, Ejection: time.Second, MaxEjection: time.Minute,
		MaxEjectionPercent: DefaultMaxEjectionPercent, PanicThreshold: DefaultPanicThreshold}
	all := Outlier{Failures: 2, Ejection: time.Second, MaxEjection: time.Minute, MaxEjectionPercent: 100, PanicThreshold: 0,
		Statuses: []StatusRange{{502, 504}, {500, 500}}}
	for _, f := range []struct {
		name, data string
		want       Outlier
	}{
		{"r.yaml", "upstreams:\n  - name: a\n    targets: [http://x]\n    outlier: {failures: 2, ejection: 1s, maxEjection: 1m}\nconfigs: [{appId: \"*\", limit: 1}]\n", defaults},
		{"r.xml", `<rules><upstream name="a"><target url="http://x"/><outlier failures="2" ejection="1s" maxEjection="1m"/></upstream><config appId="*" limit="1"/></rules>`, defaults},
		{"all.yaml", "upstreams:\n  - name: a\n    targets: [http://x]\n    outlier: {failures: 2, ejection: 1s, maxEjection: 1m, maxEjectionPercent: 100, panicThreshold: 0, statuses: [502-504, 500]}\nconfigs: [{appId: \"*\", limit: 1}]\n", all},
		{"all.json", `{"upstreams": [{"name": "a", "targets": ["http://x"], "outlier": {"failures": 2, "ejection": "1s", "maxEjection": "1m", "maxEjectionPercent": 100, "panicThreshold": 0, "statuses": ["502-504", 500]}}], "configs": [{"appId": "*", "limit": 1}]}`, all},
		{"all.xml", `<rules><upstream name="a"><target url="http://x"/><outlier failures="2" ejection="1s" maxEjection="1m" maxEjectionPercent="100" panicThreshold="0"><status>502-504</status><status>500</status></outlier></upstream><config appId="*" limit="1"/></rules>`, all},
		{"class.xml", `<rules><upstream name="a"><target url="http://x"/><outlier failures="2" ejection="1s" maxEjection="1m" statuses="5xx"/></upstream><config appId="*" limit="1"/></rules>`,
			Outlier{Failures: 2, Ejection: time.Second, MaxEjection: time.Minute, MaxEjectionPercent: DefaultMaxEjectionPercent, PanicThreshold: DefaultPanicThreshold, Statuses: []StatusRange{{500, 599}}}},
	} {
		r, err := Parse(f.name, []byte(f.data))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		got := *r.Upstreams[0].Outlier
		got.Line = 0
		if !reflect.DeepEqual(got, f.want) {
			t.Errorf("%s: got %+v, want %+v", f.name, got, f.want)
		}
	}
	_, err := Parse("rules.yaml", []byte("upstreams:\n  - name: a\n    targets: [http://x]\n    outlier:\n      maxEjectionPercent: 0\n      panicThreshold: 101\n      statuses: [404, \"5xx\", 600]\nconfigs: [{appId: \"*\", limit: 1}]\n"))
	checkErrors(t, err, []wantErr{
		{5, "outlier maxEjectionPercent 0 is outside 1..100"},
		{6, "outlier panicThreshold 101 is outside 0..100"},
		{7, "outlier status 404 is not a 5xx status"},
		{7, "outlier status the number 600 is not a status"},
	})
	_, err = Parse("rules.yaml", []byte("upstreams:\n  - name: a\n    targets: [http://x]\n    outlier:\n      ejection: 1m\n      maxEjection: 10s\nconfigs: [{appId: \"*\", limit: 1}]\n"))
	checkErrors(t, err, []wantErr{{6, "outlier maxEjection 10s is shorter than ejection 1m0s"}})
}
