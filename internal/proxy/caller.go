package proxy

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

var (
	errAppIDEmpty   = errors.New("the app ID header is present but empty")
	errAppIDTooLong = errors.New("the app ID header is longer than 128 bytes")
	errAppIDChars   = errors.New("the app ID header may contain only letters, digits and . _ : -")
)

// appID returns the caller's app ID from header h: "" when the header is
// absent, an error when it is present but invalid.
func appID(r *http.Request, h string) (string, error) {
	vs, ok := r.Header[h]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 {
		return "", errors.New("the app ID header is sent more than once")
	}
	return checkAppID(vs[0])
}

func checkAppID(v string) (string, error) {
	switch {
	case v == "":
		return "", errAppIDEmpty
	case len(v) > config.MaxAppIDLen:
		return "", errAppIDTooLong
	case !config.ValidAppID(v):
		return "", errAppIDChars
	}
	return v, nil
}

// clientIP returns the address the request came from: the peer, or, when
// the peer is a trusted proxy, the right-most X-Forwarded-For entry that is
// not itself a trusted proxy. Walking from the right means a client cannot
// choose its own address by sending a forged header: only entries appended
// by trusted proxies are believed.
func clientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not an IP peer (e.g. a unix socket or a test); one counter.
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if len(trusted) == 0 || !isTrusted(ip, trusted) {
		return ip
	}
	xff := r.Header.Values("X-Forwarded-For")
	for i := len(xff) - 1; i >= 0; i-- {
		hops := xff[i]
		for hops != "" {
			var hop string
			if j := strings.LastIndexByte(hops, ','); j >= 0 {
				hop, hops = hops[j+1:], hops[:j]
			} else {
				hop, hops = hops, ""
			}
			a, err := netip.ParseAddr(strings.TrimSpace(hop))
			if err != nil {
				// A garbled hop: trust nothing further left.
				return ip
			}
			ip = a.Unmap()
			if !isTrusted(ip, trusted) {
				return ip
			}
		}
	}
	return ip
}

func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses a list of CIDRs or bare addresses.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, errors.New("trusted proxy " + s + " is neither a CIDR nor an IP address")
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
