package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
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
	return ruleset.CheckAppID(vs[0])
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

// sameUnderscored reports whether k is name with any '-' written as '_',
// in any ASCII case.
func sameUnderscored(k, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i := 0; i < len(k); i++ {
		a, b := k[i], name[i]
		if a == '_' {
			a = '-'
		}
		if a|0x20 != b|0x20 && a != b {
			return false
		}
	}
	return true
}

// checkKey checks the API key of a caller naming sec's app: "" when it
// presents one of the app's keys, else the error code and message of a
// 401. Every digest is compared in constant time, so neither the time nor
// which digest is tried first tells a caller anything about the keys.
func (h *Handler) checkKey(r *http.Request, sec *ruleset.Section) (code, msg string) {
	vs := r.Header[h.keyHeader]
	switch {
	case len(vs) == 0 || vs[0] == "":
		return "missing_api_key", "app " + sec.App + " requires an API key in the " + h.keyHeader + " header"
	case len(vs) > 1:
		return "invalid_api_key", "the " + h.keyHeader + " header is sent more than once"
	}
	d := sha256.Sum256([]byte(vs[0]))
	match := 0
	for i := range sec.Keys {
		match |= subtle.ConstantTimeCompare(d[:], sec.Keys[i][:])
	}
	if match != 1 {
		return "invalid_api_key", "the API key in the " + h.keyHeader + " header is not one of app " + sec.App + "'s keys"
	}
	return "", ""
}

// addrGroup returns the counter key part of a client address: the address
// itself, or the network of its --ipv4-prefix or --ipv6-prefix bits, so
// that one client holding a whole IPv6 /64 gets one counter, not 2^64.
func (h *Handler) addrGroup(ip netip.Addr) string {
	return ruleset.AddrGroup(ip, h.v4Bits, h.v6Bits)
}

// foreignKey reports whether the request's key header holds an API key of
// one of rs's apps. It is asked only when the request is not counted under
// an app with keys. Every digest is compared in constant time, as in
// checkKey.
func (h *Handler) foreignKey(r *http.Request, rs *ruleset.Set) bool {
	vs := r.Header[h.keyHeader]
	if len(vs) == 0 {
		return false
	}
	match := 0
	for _, v := range vs {
		d := sha256.Sum256([]byte(v))
		for sec := range rs.Sections() {
			for i := range sec.Keys {
				match |= subtle.ConstantTimeCompare(d[:], sec.Keys[i][:])
			}
		}
	}
	return match == 1
}
