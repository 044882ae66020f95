package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelab/ratelab/algorithms"
)

// units are Envoy's units with their lengths, as envoyproxy/ratelimit
// counts them (a month is 30 days, a year 365).
var units = []struct {
	name string
	d    time.Duration
}{
	{"second", time.Second}, {"minute", time.Minute}, {"hour", time.Hour}, {"day", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour}, {"month", 30 * 24 * time.Hour}, {"year", 365 * 24 * time.Hour},
}

func unitNames() string {
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.name
	}
	return strings.Join(names, ", ")
}

var nameOK = regexp.MustCompile(`^[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}$`)

func (p *parser) limit(n *yaml.Node, path string, d *Descriptor) *Limit {
	fields, ok := p.mapping(n, path, limitFields)
	if !ok {
		return nil
	}
	errs := len(p.errs)
	l := &Limit{Descriptor: d, Line: deref(n).Line, Field: path, Cost: 1, Shadow: d.ShadowMode || d.QuotaMode, Quota: d.QuotaMode,
		Algorithm: p.o.algorithm}
	if f, ok := fields["name"]; ok {
		l.nameLine = f.key.Line
		if s, ok := p.text(f, join(path, "name")); ok {
			if s != "" && !nameOK.MatchString(s) {
				p.errorf(f.val, join(path, "name"), "%q: a name is 1 to 64 printable ASCII characters, no \" or \\", s)
			}
			l.Name = s
		}
	}
	if f, ok := fields["unlimited"]; ok {
		l.Unlimited, _ = p.boolean(f, join(path, "unlimited"))
	}
	if f, ok := fields["shadow_mode"]; ok {
		if b, ok := p.boolean(f, join(path, "shadow_mode")); ok && b {
			l.Shadow = true
		}
	}
	if f, ok := fields["replaces"]; ok {
		p.replaces(l, f, join(path, "replaces"))
	}
	if _, ok := fields["in_flight"]; ok {
		p.inFlight(l, fields, n)
	} else if f, ok := fields["lease"]; ok {
		p.errorf(f.key, join(path, "lease"), "a lease is for an in-flight limit (in_flight: N)")
	} else if l.Unlimited {
		for _, name := range []string{"unit", "window", "unit_multiplier", "requests_per_unit", "algorithm", "burst", "cost"} {
			f, ok := fields[name]
			switch {
			case !ok:
			case name == "requests_per_unit" && p.o.service:
				p.warnf(f.key, join(path, name), "ignored: an unlimited limit has no requests per unit (envoyproxy/ratelimit ignores it too)")
			default:
				p.errorf(f.key, join(path, name), "an unlimited limit has no %s (Envoy: should not specify rate limit unit when unlimited)",
					strings.ReplaceAll(name, "_", " "))
			}
		}
	} else {
		p.window(l, fields, n)
		p.requests(l, fields, n)
		if f, ok := fields["algorithm"]; ok {
			if s, ok := p.text(f, join(path, "algorithm")); ok {
				if !slices.Contains(algorithms.Algorithms(), s) {
					p.errorf(f.val, join(path, "algorithm"), "%q is not an algorithm (want %s)", s, strings.Join(algorithms.Algorithms(), ", "))
				}
				l.Algorithm = s
			}
		}
		if f, ok := fields["burst"]; ok {
			p.burst(l, f, join(path, "burst"))
		}
		if f, ok := fields["cost"]; ok {
			if c, ok := p.integer(f, join(path, "cost")); ok {
				switch {
				case c < 0:
					p.errorf(f.val, join(path, "cost"), "must be 0 or more (got %d)", c)
				case l.Policy.Limit > 0 && c > l.Policy.Limit:
					p.errorf(f.val, join(path, "cost"), "%d is more than requests_per_unit (%d): no request could be admitted", c, l.Policy.Limit)
				case l.Policy.Burst > 0 && c > l.Policy.Burst:
					p.errorf(f.val, join(path, "cost"), "%d is more than the burst (%d): no request could be admitted", c, l.Policy.Burst)
				}
				l.Cost = c
			}
		}
	}
	if len(p.errs) > errs {
		return nil
	}
	return l
}

// burst reads burst into l.Policy.Burst: the most admitted at one instant,
// for the algorithms that have one (token-bucket, gcra), read once the
// algorithm and the window are.
func (p *parser) burst(l *Limit, f field, path string) {
	b, ok := p.integer(f, path)
	if !ok {
		return
	}
	switch {
	case b < 1:
		p.errorf(f.val, path, "must be at least 1 (got %d)", b)
	case !algorithms.HasBurst(l.Algorithm):
		p.errorf(f.key, path, "%s has no burst: a burst is for algorithm: token-bucket or gcra", l.Algorithm)
	case l.Policy.Window > 0 && (algorithms.Policy{Limit: 1, Window: l.Policy.Window, Burst: b}).Validate() != nil:
		p.errorf(f.val, path, "× the window in ms must be below 2^53 (got %d × %d)", b, l.Policy.Window.Milliseconds())
	default:
		l.Policy.Burst = b
	}
}

// window reads unit (with unit_multiplier) or window into l.Policy.Window.
func (p *parser) window(l *Limit, fields map[string]field, n *yaml.Node) {
	path := l.Field
	unit, hasUnit := fields["unit"]
	win, hasWindow := fields["window"]
	mult, hasMult := fields["unit_multiplier"]
	switch {
	case hasUnit && hasWindow:
		p.errorf(win.key, join(path, "window"), "give window or unit, not both")
		return
	case hasMult && !hasUnit:
		p.errorf(mult.key, join(path, "unit_multiplier"), "needs unit (a window of unit_multiplier units)")
		return
	case !hasUnit && !hasWindow:
		p.errorf(n, path, "needs a unit (%s) or a window (such as 30s)", unitNames())
		return
	case hasWindow:
		s, ok := p.text(win, join(path, "window"))
		if !ok {
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			p.errorf(win.val, join(path, "window"), "%q is not a duration (such as 30s, 5m or 1h30m)", s)
			return
		}
		p.checkWindow(l, d, win.val, join(path, "window"), s)
		return
	}
	s, ok := p.text(unit, join(path, "unit"))
	if !ok {
		return
	}
	i := slices.IndexFunc(units, func(u struct {
		name string
		d    time.Duration
	}) bool {
		return strings.EqualFold(u.name, s)
	})
	if i < 0 {
		p.errorf(unit.val, join(path, "unit"), "%q is not a unit (want %s)", s, unitNames())
		return
	}
	times := int64(1)
	if hasMult {
		m, ok := p.integer(mult, join(path, "unit_multiplier"))
		if !ok {
			return
		}
		if m < 1 || m > int64(maxWindow/units[i].d) {
			p.errorf(mult.val, join(path, "unit_multiplier"), "must be between 1 and %d (a year of %ss; got %d)",
				int64(maxWindow/units[i].d), units[i].name, m)
			return
		}
		times = m
	}
	if times == 1 {
		l.Unit = units[i].name
	}
	l.Policy.Window = time.Duration(times) * units[i].d
}

func (p *parser) checkWindow(l *Limit, d time.Duration, n *yaml.Node, path, s string) {
	switch {
	case d <= 0:
		p.errorf(n, path, "%q: a window is positive", s)
	case d%time.Millisecond != 0:
		p.errorf(n, path, "%q: a window is a whole number of milliseconds", s)
	case d > maxWindow:
		p.errorf(n, path, "%q: a window is at most a year (8760h)", s)
	default:
		l.Policy.Window = d
	}
}

// requests reads requests_per_unit into l.Policy.Limit, and checks the
// policy once both are known.
func (p *parser) requests(l *Limit, fields map[string]field, n *yaml.Node) {
	path := join(l.Field, "requests_per_unit")
	f, ok := fields["requests_per_unit"]
	switch {
	case !ok && p.o.service:
		p.warnf(n, path, "missing: read as 0, as envoyproxy/ratelimit reads it: every request that adds a hit is over the limit")
		l.Blocks = true
		return
	case !ok:
		p.errorf(n, path, "missing: how many requests per window")
		return
	}
	r, ok := p.integer(f, path)
	if !ok {
		return
	}
	if r == 0 && p.o.service {
		l.Blocks = true
		return
	}
	if r < 1 {
		hint := ""
		if r == 0 {
			hint = ": a limit that refuses every request (Envoy's 0) is served by ratelab rls only"
		}
		p.errorf(f.val, path, "must be at least 1 (got %d)%s", r, hint)
		return
	}
	l.Policy.Limit = r
	if l.Policy.Window > 0 {
		if err := l.Policy.Validate(); err != nil {
			p.errorf(f.val, path, "× the window in ms must be below 2^53 (got %d × %d)", r, l.Policy.Window.Milliseconds())
		}
	}
}

func (p *parser) replaces(l *Limit, f field, path string) {
	list, ok := p.sequence(f, path)
	if !ok {
		return
	}
	if len(list) > maxReplaces {
		p.errorf(f.key, path, "%d names: a limit replaces at most %d", len(list), maxReplaces)
		return
	}
	for i, n := range list {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		fields, ok := p.mapping(n, ipath, replacesFields)
		if !ok {
			continue
		}
		nf, ok := fields["name"]
		if !ok {
			p.errorf(n, join(ipath, "name"), "missing: replaces names a limit")
			continue
		}
		name, ok := p.text(nf, join(ipath, "name"))
		switch {
		case !ok:
		case name == "":
			p.errorf(nf.key, join(ipath, "name"), "is empty: replaces names a limit")
		case name == l.Name:
			p.errorf(nf.val, join(ipath, "name"), "%q is this limit's own name: a limit cannot replace itself", name)
		default:
			l.Replaces = append(l.Replaces, name)
			l.replacesLines = append(l.replacesLines, nf.val.Line)
		}
	}
}

// DefaultLease is the lease of an in-flight limit that gives none.
const DefaultLease = 30 * time.Second

// inFlight reads an in-flight limit: in_flight (the most in flight at once)
// into l.Policy.Limit, lease (how long a slot is held at most) into
// l.Policy.Window. The fields of a rate limit are refused beside them.
func (p *parser) inFlight(l *Limit, fields map[string]field, n *yaml.Node) {
	path := l.Field
	if p.o.service {
		f := fields["in_flight"]
		p.errorf(f.key, join(path, "in_flight"), "not served by rls: Envoy's rate limit protocol has no call that ends a request, so a slot could never be released (use ratelab edge)")
		return
	}
	for _, name := range []string{"requests_per_unit", "unit", "unit_multiplier", "window", "algorithm", "burst", "cost", "unlimited"} {
		if f, ok := fields[name]; ok {
			p.errorf(f.key, join(path, name), "an in-flight limit has no %s: it holds in_flight requests at once, each for at most its lease",
				strings.ReplaceAll(name, "_", " "))
		}
	}
	l.InFlight, l.Algorithm, l.Unlimited = true, algorithms.InFlight, false
	if v, ok := p.integer(fields["in_flight"], join(path, "in_flight")); ok {
		if v < 1 {
			p.errorf(fields["in_flight"].val, join(path, "in_flight"), "must be at least 1 (got %d)", v)
		} else {
			l.Policy.Limit = v
		}
	}
	l.Policy.Window = DefaultLease
	if f, ok := fields["lease"]; ok {
		s, ok := p.text(f, join(path, "lease"))
		if !ok {
			return
		}
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			p.errorf(f.val, join(path, "lease"), "%q is not a duration (such as 30s or 2m)", s)
		case d <= 0:
			p.errorf(f.val, join(path, "lease"), "%q: a lease is positive", s)
		case d%time.Millisecond != 0:
			p.errorf(f.val, join(path, "lease"), "%q: a lease is a whole number of milliseconds", s)
		case d > maxWindow:
			p.errorf(f.val, join(path, "lease"), "%q: a lease is at most a year (8760h)", s)
		default:
			l.Policy.Window = d
		}
	}
	if l.Policy.Limit > 0 && l.Policy.Validate() != nil {
		p.errorf(fields["in_flight"].val, join(path, "in_flight"), "× the lease in ms must be below 2^53")
	}
}
