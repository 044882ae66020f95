package bench

import (
	"net"
	"net/netip"
	"strings"

	"github.com/ratelab/ratelab/internal/field"
)

// MaxSourceIPs bounds the source addresses of a run: one per consumer.
const MaxSourceIPs = 65536

// ParseSourceIPs reads source addresses written as a comma-separated list
// of addresses and ascending ranges FROM-TO, both ends included:
// "127.0.0.2-127.0.0.60" or "127.0.0.2,127.0.0.3". At most MaxSourceIPs in
// all. Errors are *field.Error naming SourceIPs.
func ParseSourceIPs(s string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		from, to, isRange := strings.Cut(item, "-")
		lo, err := netip.ParseAddr(from)
		if err != nil {
			return nil, field.Errorf("SourceIPs", "%q: %q is not an IP address", s, from)
		}
		hi := lo
		if isRange {
			if hi, err = netip.ParseAddr(to); err != nil {
				return nil, field.Errorf("SourceIPs", "%q: %q is not an IP address", s, to)
			}
			if hi.Is4() != lo.Is4() || hi.Less(lo) {
				return nil, field.Errorf("SourceIPs", "%q: the range %s must ascend, in one address family", s, item)
			}
		}
		for a := lo; ; a = a.Next() {
			if len(addrs) == MaxSourceIPs {
				return nil, field.Errorf("SourceIPs", "%q: more than %d addresses", s, MaxSourceIPs)
			}
			addrs = append(addrs, a)
			if a == hi {
				break
			}
		}
	}
	return addrs, nil
}

// validateSourceIPs checks that each consumer has an address of its own
// that a connection can be bound to.
func (c HTTPConfig) validateSourceIPs() error {
	if len(c.SourceIPs) == 0 {
		return nil
	}
	if len(c.SourceIPs) != c.Consumers {
		return field.Errorf("SourceIPs", "gives %d addresses for %d consumers: one each", len(c.SourceIPs), c.Consumers)
	}
	seen := make(map[netip.Addr]bool, len(c.SourceIPs))
	for _, a := range c.SourceIPs {
		switch {
		case !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "":
			return field.Errorf("SourceIPs", "%s is not an address a connection can be sent from", a)
		case seen[a]:
			return field.Errorf("SourceIPs", "gives %s twice: two consumers would be one to the gateway", a)
		}
		seen[a] = true
	}
	return nil
}

// localAddr is the address consumer's connections are sent from; nil
// when the run has no source addresses (or no consumer).
func (p *plan) localAddr(consumer int) net.Addr {
	if consumer < 0 || consumer >= len(p.sources) {
		return nil
	}
	return &net.TCPAddr{IP: p.sources[consumer].AsSlice()}
}

// consumerName names consumer c as the audit does: by its source
// address when it has one (the gateway tells consumers apart by it), else
// by its identity's pseudonym when the result may not show it, else as the
// requests name it.
func (p *plan) consumerName(c int32) string {
	if c >= 0 && int(c) < len(p.sources) {
		return p.sources[c].String()
	}
	if c >= 0 && int(c) < len(p.pseudonyms) {
		return p.pseudonyms[c]
	}
	if p.req == nil { // not HTTP: its identity, or consumer-N
		if c >= 0 && int(c) < len(p.identities) {
			return p.identities[c]
		}
		return consumerName(c)
	}
	return p.req.name(c)
}

// addrNames are the addresses as the audit names their consumers.
func addrNames(addrs []netip.Addr) []string {
	if len(addrs) == 0 {
		return nil
	}
	names := make([]string, len(addrs))
	for i, a := range addrs {
		names[i] = a.String()
	}
	return names
}

// addrsText writes addresses as ParseSourceIPs reads them, each run of
// consecutive ones as a range: "127.0.0.2-127.0.0.60".
func addrsText(addrs []netip.Addr) string {
	var parts []string
	for i := 0; i < len(addrs); {
		j := i
		for j+1 < len(addrs) && addrs[j].Next() == addrs[j+1] {
			j++
		}
		if j == i {
			parts = append(parts, addrs[i].String())
		} else {
			parts = append(parts, addrs[i].String()+"-"+addrs[j].String())
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
