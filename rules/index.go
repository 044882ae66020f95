package rules

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/internal/edits"
)

// crossCheck checks what no single field shows: that there are limits
// (ForService warns of none), that names are unique and that replaces
// names a limit. It names every
// limit (ID) and finds its tag key.
func (p *parser) crossCheck() {
	var limits []*Limit
	walk(p.set.Descriptors, func(d *Descriptor) { limits = append(limits, d.Limits...) })
	if len(limits) == 0 {
		if p.o.service {
			p.warns = append(p.warns, &Error{File: p.file, Line: p.rootLine, Field: "descriptors",
				Message: fmt.Sprintf("no limits: every descriptor of domain %q is answered OK", p.set.Domain)})
			return
		}
		p.errs = append(p.errs, &Error{File: p.file, Line: p.rootLine, Field: "descriptors",
			Message: "no limits: give at least one descriptor a rate_limit"})
		return
	}
	named := map[string]*Limit{}
	for _, l := range limits {
		if l.Name == "" {
			continue
		}
		if first, ok := named[l.Name]; ok {
			p.errs = append(p.errs, &Error{File: l.file(), Line: l.nameLine, Field: join(l.Field, "name"),
				Message: fmt.Sprintf("%q is also the name of the limit at %s (%s): names are unique", l.Name,
					lineIn(first.file(), first.Line, l.file()), first.Field)})
			continue
		}
		named[l.Name] = l
	}
	known := make([]string, 0, len(named))
	for _, l := range limits {
		if l.Name != "" {
			known = append(known, l.Name)
		}
	}
	suggested := 0
	for _, l := range limits {
		for i, r := range l.Replaces {
			if _, ok := named[r]; ok {
				continue
			}
			// A suggestion compares the name with every other: only as
			// many as are reported.
			hint := ""
			if suggested++; suggested <= maxErrors {
				hint = suggestName(r, known)
			}
			p.errs = append(p.errs, &Error{File: l.file(), Line: l.replacesLines[i], Field: fmt.Sprintf("%s.replaces[%d].name", l.Field, i),
				Message: fmt.Sprintf("no limit is named %q%s", r, hint)})
		}
	}
	ids := map[string]*Limit{}
	for _, l := range limits {
		l.ID = l.Name
		if l.ID == "" {
			l.ID = defaultID(l)
		}
		if other, ok := ids[l.ID]; ok {
			if l.Name != "" && other.Name != "" {
				continue // two limits of one name: said above
			}
			unnamed, named := l, other
			if l.Name != "" {
				unnamed, named = other, l
			}
			p.errs = append(p.errs, &Error{File: unnamed.file(), Line: unnamed.Line, Field: unnamed.Field,
				Message: fmt.Sprintf("its default name %q is the name of the limit at %s: give it a name", l.ID,
					lineIn(named.file(), named.Line, unnamed.file()))})
			continue
		}
		ids[l.ID] = l
		l.tagKey = tagKey(l.Descriptor)
		l.domain = p.set.Domain
	}
	p.set.limits = limits
}

func suggestName(name string, known []string) string {
	for _, k := range known {
		if edits.Distance(k, name) <= 2 {
			return fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return ""
}

// defaultID names an unnamed limit after its place: the composite keys
// from the top, as envoyproxy/ratelimit's statistics do, and #i for the
// ith of a rate_limits list. It is printable ASCII, at most 64 bytes.
func defaultID(l *Limit) string {
	id := l.Descriptor.fullKey()
	if len(l.Descriptor.Limits) > 1 {
		id += "#" + strconv.Itoa(l.index)
	}
	ascii := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, id)
	if ascii != id || len(ascii) > 64 {
		sum := sha1.Sum([]byte(id))
		ascii = ascii[:min(len(ascii), 47)] + "~" + hex.EncodeToString(sum[:8])
	}
	return ascii
}

// tagKey is the key of the first node on d's path, from the top, whose
// value is per request; empty when every value on the path is fixed.
func tagKey(d *Descriptor) string {
	var path []*Descriptor
	for n := d; n != nil; n = n.Parent {
		path = append(path, n)
	}
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].perValue {
			return path[i].entryKey()
		}
	}
	return ""
}

// walk calls f on every descriptor, parents before children, in file order.
func walk(ds []*Descriptor, f func(*Descriptor)) {
	for _, d := range ds {
		f(d)
		walk(d.Descriptors, f)
	}
}

// level indexes the children of one node (or the top level) for both
// walks.
type level struct {
	// composite and wildcards are envoyproxy/ratelimit's index: by key or
	// key_value, and the nodes whose value ends in *, in file order.
	composite map[string]*Descriptor
	wildcards []*Descriptor
	// groups are the gateway's: one per distinct key, in file order.
	groups []group
}

// group is a level's nodes with one key.
type group struct {
	key      string // the entry key: the attribute's canonical form
	attr     Attribute
	exact    map[string]*Descriptor
	prefixes []*Descriptor
	keyOnly  *Descriptor
	all      []*Descriptor // every node, for generic_key
}

// index builds the levels of the tree and the tags, once parsing is done.
func (s *Set) index() {
	s.root = newLevel(s.Descriptors)
	walk(s.Descriptors, func(d *Descriptor) { d.children = newLevel(d.Descriptors) })
	tag := tagOf(s.Domain)
	s.domainTag = string(tag[:])
	for _, l := range s.limits {
		if len(l.Replaces) > 0 {
			s.replaceAny = true
		}
	}
	walk(s.Descriptors, func(d *Descriptor) {
		for _, a := range []Attribute{d.attr, d.fallback} {
			if a.Kind != KindNone && a.Kind != KindGeneric && !slices.Contains(s.attrs, a) {
				s.attrs = append(s.attrs, a)
			}
		}
	})
}

func newLevel(ds []*Descriptor) level {
	if len(ds) == 0 {
		return level{}
	}
	lv := level{composite: make(map[string]*Descriptor, len(ds))}
	for _, d := range ds {
		lv.composite[d.composite()] = d
		if _, ok := d.Prefix(); ok {
			d.compositePrefix = strings.TrimSuffix(d.composite(), "*")
			lv.wildcards = append(lv.wildcards, d)
		}
		if d.attr.Kind == KindNone {
			continue // never met in the gateway
		}
		key := d.attr.String()
		gi := -1
		for i := range lv.groups {
			if lv.groups[i].key == key {
				gi = i
			}
		}
		if gi < 0 {
			lv.groups = append(lv.groups, group{key: key, attr: d.attr, exact: map[string]*Descriptor{}})
			gi = len(lv.groups) - 1
		}
		g := &lv.groups[gi]
		g.all = append(g.all, d)
		prefix, wild := d.Prefix()
		switch {
		case d.Value == "":
			g.keyOnly = d
		case wild:
			d.prefix = d.attr.normalize(prefix)
			g.prefixes = append(g.prefixes, d)
		default:
			g.exact[d.attr.normalize(d.Value)] = d
		}
	}
	return lv
}
