package proxy

import (
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// FuzzClientIP checks the X-Forwarded-For walk on arbitrary headers: it
// never panics, and the address it returns is the peer's or one written
// in the header — never one made up — and it is the peer's whenever the
// peer is not trusted.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "1.2.3.4")
	f.Add("10.0.0.1:1", "6.6.6.6, 1.2.3.4, 10.1.1.1")
	f.Add("10.0.0.1:1", "bogus, 10.0.0.2")
	f.Add("203.0.113.5:9", "1.2.3.4")
	f.Add("[::1]:80", "::ffff:1.2.3.4,,  , 2001:db8::1")
	f.Add("10.0.0.1:1", strings.Repeat("10.9.9.9,", 100))
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/8", "::1/128"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		got := clientIP(r, trusted)
		if !got.IsValid() {
			return // the peer is not an address
		}
		peerIP := clientIP(r, nil)
		if !isTrusted(peerIP, trusted) && got != peerIP {
			t.Fatalf("untrusted peer %s: got %s from XFF %q", peer, got, xff)
		}
		// Compared as addresses, not text: "0:001::0" is 0:1::, and
		// "::ffff:1.2.3.4" is unmapped to 1.2.3.4.
		if got != peerIP && !slices.Contains(hops(xff), got) {
			t.Fatalf("got %s, which is neither the peer %s nor in XFF %q", got, peer, xff)
		}
	})
}

// hops returns the addresses written in an X-Forwarded-For value.
func hops(xff string) []netip.Addr {
	var addrs []netip.Addr
	for _, h := range strings.Split(xff, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(h)); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	return addrs
}
