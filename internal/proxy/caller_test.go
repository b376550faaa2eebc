package proxy

import (
	"net/http/httptest"
	"testing"
)

func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.1", " "})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		peer    string
		xff     []string
		trusted bool
		want    string
	}{
		{name: "peer, no proxies", peer: "203.0.113.5:40000", want: "203.0.113.5"},
		{name: "untrusted peer's XFF ignored", peer: "203.0.113.5:1", xff: []string{"1.2.3.4"}, trusted: true, want: "203.0.113.5"},
		{name: "XFF ignored without trusted proxies", peer: "10.0.0.1:1", xff: []string{"1.2.3.4"}, want: "10.0.0.1"},
		{name: "trusted peer, one hop", peer: "10.0.0.1:1", xff: []string{"1.2.3.4"}, trusted: true, want: "1.2.3.4"},
		{name: "right-most untrusted wins over a forged left entry", peer: "10.0.0.1:1", xff: []string{"6.6.6.6, 1.2.3.4, 10.1.1.1"}, trusted: true, want: "1.2.3.4"},
		{name: "several XFF headers", peer: "10.0.0.1:1", xff: []string{"6.6.6.6", "1.2.3.4, 192.0.2.1"}, trusted: true, want: "1.2.3.4"},
		{name: "all hops trusted", peer: "10.0.0.1:1", xff: []string{"10.2.2.2"}, trusted: true, want: "10.2.2.2"},
		{name: "garbled hop stops the walk", peer: "10.0.0.1:1", xff: []string{"1.2.3.4, bogus, 10.3.3.3"}, trusted: true, want: "10.3.3.3"},
		{name: "IPv6 peer", peer: "[2001:db8::1]:443", want: "2001:db8::1"},
		{name: "IPv4-mapped peer", peer: "[::ffff:203.0.113.5]:1", want: "203.0.113.5"},
		{name: "not an address", peer: "pipe", want: "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			tp := trusted
			if !tt.trusted {
				tp = nil
			}
			if got := clientIP(r, tp).String(); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestParseTrustedProxiesRejectsGarbage(t *testing.T) {
	t.Parallel()
	if _, err := ParseTrustedProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("10.0.0.0/33: got no error")
	}
	if _, err := ParseTrustedProxies([]string{"proxy.local"}); err == nil {
		t.Error("proxy.local: got no error")
	}
}
