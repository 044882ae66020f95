package edge

import (
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzIdentify parses any --key-by and --trusted-proxies, and identifies a
// request from any peer address, X-Forwarded-For and identifying header, as
// a client or a proxy may send them. The key is always a kind and 32 hex
// digits (one Cluster slot, a bounded key); the label is short, printable
// and free of braces; and the client's address is the peer's, or, behind a
// trusted proxy, an address from X-Forwarded-For that no trusted proxy
// holds.
func FuzzIdentify(f *testing.F) {
	f.Add("ip", "10.0.0.0/8", "10.0.0.1:5000", "203.0.113.9, 10.0.0.2", "")
	f.Add("ip", "10.0.0.0/8,::1/128", "[::1]:5000", "198.51.100.7:443, [2001:db8::1]:80", "")
	f.Add("ip", "10.0.0.0/8", "203.0.113.5:1", "1.2.3.4", "") // an untrusted peer: its own address
	f.Add("ip", "0.0.0.0/0", "10.0.0.1:5000", "garbage, 10.0.0.3", "")
	f.Add("ip", "::ffff:10.0.0.0/104", "[::ffff:10.0.0.1]:5000", "::ffff:203.0.113.1", "")
	f.Add("ip", "fe80::/10", "[fe80::1%eth0]:5000", "fe80::2%eth1", "")
	f.Add("header:X-Api-Key", "", "10.0.0.1:5000", "", "key-{abc}\x00\x7f\xff")
	f.Add("header:x-consumer-id", " 192.168.0.0/16 ", "not an address", "", strings.Repeat("é", 40))
	f.Add("header:", "300.0.0.0/8", "", "", "")
	f.Fuzz(func(t *testing.T, spec, trusted, remote, xff, value string) {
		var proxies []string
		if trusted != "" {
			proxies = strings.Split(trusted, ",")
		}
		k, err := ParseKeyBy(spec, proxies)
		if err != nil {
			return
		}
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if k.Header != "" && value != "" {
			r.Header.Set(k.Header, value)
		}
		id := k.Identify(r)
		kind, sum, ok := strings.Cut(id.Key, ":")
		if !ok || (kind != "ip" && kind != "h") || len(sum) != 32 {
			t.Fatalf("key %q", id.Key)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			t.Fatalf("key %q: %v", id.Key, err)
		}
		if len(id.Label) > 64 || !utf8.ValidString(id.Label) || strings.ContainsAny(id.Label, "{}\x7f") {
			t.Fatalf("label %q", id.Label)
		}
		for _, c := range id.Label {
			if c < 0x20 {
				t.Fatalf("label %q", id.Label)
			}
		}
		ip := k.clientIP(r)
		peer, err := netip.ParseAddrPort(remote)
		if err != nil || !k.trusted(peer.Addr()) {
			return // the peer's own address, whatever it is
		}
		if ip == peer.Addr().Unmap().String() {
			return
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || k.trusted(a) || !hopOf(xff, a) {
			t.Fatalf("behind trusted %v, X-Forwarded-For %q: client %q", k.TrustedProxies, xff, ip)
		}
	})
}

// hopOf reports whether a is one of the hops of X-Forwarded-For xff.
func hopOf(xff string, a netip.Addr) bool {
	for _, h := range strings.Split(xff, ",") {
		if b, err := parseHop(h); err == nil && b.Unmap() == a {
			return true
		}
	}
	return false
}
