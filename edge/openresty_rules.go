package edge

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ratelab/ratelab/rules"
)

// RenderRules writes set as the Lua table the OpenResty module matches
// requests with (edge/openresty/ratelimit.lua's rules mode): the set's
// version and file, which its /healthz shows, and the tree of
// descriptors grouped by key, as rules.Set.Match walks it, with every
// limit's ID, algorithm, policy (its burst 0 when none), cost, shadow mode
// and replaces. The module
// derives the same counter keys as the Go gateway. A key the module cannot
// read is refused as a *rules.Error naming its line and field.
func RenderRules(set *rules.Set) (string, error) {
	var b strings.Builder
	tag := sha1.Sum([]byte(set.Domain))
	fmt.Fprintf(&b, "return {\n  domain = %s,\n  domain_tag = %s,\n  version = %s,\n  file = %s,\n  root = ", luaString(set.Domain),
		luaString(hex.EncodeToString(tag[:8])), luaString(set.Version), luaString(set.File))
	if err := renderLevel(&b, set, set.Descriptors, "  "); err != nil {
		return "", err
	}
	b.WriteString(",\n}\n")
	return b.String(), nil
}

// renderLevel writes one level of the tree: its groups, one per key, in the
// order the keys first appear.
func renderLevel(b *strings.Builder, set *rules.Set, ds []*rules.Descriptor, indent string) error {
	type group struct {
		attr     rules.Attribute
		exact    []*rules.Descriptor
		prefixes []*rules.Descriptor
		keyOnly  *rules.Descriptor
		all      []*rules.Descriptor
	}
	var groups []*group
	for _, d := range ds {
		a := d.Attribute()
		if a.Kind == rules.KindNone {
			return &rules.Error{File: set.File, Line: d.Line, Field: d.Field + ".key",
				Message: fmt.Sprintf("%q is not a key the openresty engine reads", d.Key)}
		}
		var g *group
		for _, o := range groups {
			if o.attr == a {
				g = o
			}
		}
		if g == nil {
			g = &group{attr: a}
			groups = append(groups, g)
		}
		g.all = append(g.all, d)
		_, wild := d.Prefix()
		switch {
		case d.Value == "":
			g.keyOnly = d
		case wild:
			g.prefixes = append(g.prefixes, d)
		default:
			g.exact = append(g.exact, d)
		}
	}
	in := indent + "  "
	b.WriteString("{\n")
	for _, g := range groups {
		fmt.Fprintf(b, "%s{ key = %s, kind = %s, name = %s,\n", in, luaString(g.attr.String()), luaString(string(g.attr.Kind)),
			luaString(strings.ToLower(g.attr.Name)))
		if g.attr.Kind == rules.KindGeneric {
			fmt.Fprintf(b, "%s  all = {\n", in)
			for _, d := range g.all {
				if err := renderNode(b, set, d, in+"    "); err != nil {
					return err
				}
			}
			fmt.Fprintf(b, "%s  },\n", in)
		} else {
			fmt.Fprintf(b, "%s  exact = {\n", in)
			for _, d := range g.exact {
				fmt.Fprintf(b, "%s    [%s] = ", in, luaString(normalize(g.attr, d.Value)))
				if err := renderNode(b, set, d, in+"    "); err != nil {
					return err
				}
			}
			fmt.Fprintf(b, "%s  },\n%s  prefixes = {\n", in, in)
			for _, d := range g.prefixes {
				if err := renderNode(b, set, d, in+"    "); err != nil {
					return err
				}
			}
			fmt.Fprintf(b, "%s  },\n", in)
			if g.keyOnly != nil {
				fmt.Fprintf(b, "%s  key_only = ", in)
				if err := renderNode(b, set, g.keyOnly, in+"  "); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(b, "%s},\n", in)
	}
	b.WriteString(indent + "}")
	return nil
}

// renderNode writes one descriptor: its value, whether it counts per value
// or shares one counter among the values it matches (share_threshold), its
// fallback key, its limits and the level under it.
func renderNode(b *strings.Builder, set *rules.Set, d *rules.Descriptor, indent string) error {
	in := indent + "  "
	prefix, _ := d.Prefix()
	fmt.Fprintf(b, "{\n%svalue = %s, prefix = %s, per_value = %t, shared = %t,\n", in, luaString(d.Value),
		luaString(normalize(d.Attribute(), prefix)), d.PerValue(), d.ShareThreshold)
	if d.FallbackKey != "" {
		kind, name, _ := strings.Cut(d.FallbackKey, ":")
		fmt.Fprintf(b, "%sfallback = { key = %s, kind = %s, name = %s },\n", in, luaString(d.FallbackKey), luaString(kind),
			luaString(strings.ToLower(name)))
	}
	fmt.Fprintf(b, "%slimits = {\n", in)
	for _, l := range d.Limits {
		fmt.Fprintf(b, "%s  { id = %s, name = %s, algorithm = %s, limit = %d, window_ms = %d, burst = %d, cost = %d, shadow = %t, unlimited = %t, replaces = {",
			in, luaString(l.ID), luaString(l.Name), luaString(l.Algorithm), l.Policy.Limit, l.Policy.Window.Milliseconds(), l.Policy.Burst, l.Cost,
			l.Shadow, l.Unlimited)
		for i, r := range l.Replaces {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(luaString(r))
		}
		b.WriteString("} },\n")
	}
	fmt.Fprintf(b, "%s},\n%schildren = ", in, in)
	if err := renderLevel(b, set, d.Descriptors, in); err != nil {
		return err
	}
	fmt.Fprintf(b, ",\n%s},\n", indent)
	return nil
}

// normalize is a value of a as the gateway compares it: a host in lower case.
func normalize(a rules.Attribute, v string) string {
	if a.Kind == rules.KindHost {
		return strings.ToLower(v)
	}
	return v
}

// luaString quotes s for Lua 5.1: printable ASCII as it is, every other
// byte, the quote and the backslash as a decimal escape.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			fmt.Fprintf(&b, "\\%03d", c)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}
