package edge

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Identity says who a request is from: the consumer part of its Redis key.
type Identity struct {
	// Key is the consumer as it goes into the Redis key: a kind and a hash,
	// bounded in length and free of braces, so that any input keeps one
	// Cluster slot per consumer and a bounded key.
	Key string
	// Label is a short, printable form for logs and counts (at most 64 bytes).
	Label string
}

// KeyBy identifies requests.
type KeyBy struct {
	// Header, when set, identifies requests by this header's value (safe only
	// behind something that authenticates it); requests without it fall back
	// to the address.
	Header string
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
}

// ParseKeyBy parses "ip" or "header:NAME", and the trusted proxies' CIDRs.
func ParseKeyBy(spec string, trusted []string) (KeyBy, error) {
	var k KeyBy
	switch {
	case spec == "ip":
	case strings.HasPrefix(spec, "header:") && len(spec) > len("header:"):
		k.Header = http.CanonicalHeaderKey(strings.TrimPrefix(spec, "header:"))
	default:
		return k, fmt.Errorf("unknown key %q (want ip or header:NAME)", spec)
	}
	for _, c := range trusted {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return k, fmt.Errorf("trusted proxy %q: %w", c, err)
		}
		k.TrustedProxies = append(k.TrustedProxies, p.Masked())
	}
	return k, nil
}

// Identify returns the identity of r.
func (k KeyBy) Identify(r *http.Request) Identity {
	if k.Header != "" {
		if v := r.Header.Get(k.Header); v != "" {
			return identity("h", v)
		}
	}
	return identity("ip", k.clientIP(r))
}

// clientIP is the peer's address or, when the peer is a trusted proxy, the
// last address in X-Forwarded-For that is not itself a trusted proxy.
func (k KeyBy) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if !k.trusted(peer) {
		return peer.Unmap().String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := parseHop(hops[i])
		if err != nil {
			break // a malformed hop: stop at the last address we can trust
		}
		if !k.trusted(a) {
			return a.Unmap().String()
		}
	}
	return peer.Unmap().String()
}

// parseHop parses one X-Forwarded-For hop: an address, with or without a
// port, IPv6 with or without brackets.
func parseHop(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), nil
	}
	return netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
}

func (k KeyBy) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range k.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// identity hashes raw into a bounded key, and keeps a short printable label.
func identity(kind, raw string) Identity {
	sum := sha1.Sum([]byte(raw)) // the OpenResty module has only SHA-1: the same keys from both engines
	label := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, raw)
	if len(label) > 64 {
		label = strings.ToValidUTF8(label[:64], "")
	}
	return Identity{Key: kind + ":" + hex.EncodeToString(sum[:16]), Label: label}
}
