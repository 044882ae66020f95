package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelab/ratelab/algorithms"
)

// Bounds on what one file may hold, so that no input (YAML aliases
// included, which can repeat a list many times over) makes Parse work
// without end.
const (
	maxDepth       = 16    // levels of nested descriptors
	maxDescriptors = 10000 // descriptors in the whole tree
	maxErrors      = 20    // mistakes reported at once
	maxWindow      = 365 * 24 * time.Hour
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

// Fields of each mapping, and the Envoy fields of the pinned version that
// ratelab does not implement: refused by name when set, never ignored.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "descriptors", "rate_limit", "rate_limits", "shadow_mode",
		"detailed_metric", "fallback_key", "quota_mode", "value_to_metric", "share_threshold"}
	limitFields = []string{"name", "unit", "requests_per_unit", "unlimited", "replaces", "algorithm", "window",
		"unit_multiplier", "cost", "shadow_mode"}
	replacesFields = []string{"name"}
	notImplemented = []string{"quota_mode", "value_to_metric", "share_threshold"}
)

// Parse reads a rules file: name is what errors call it (its path), src
// its bytes. The result is checked; every mistake is an *Error naming the
// line and the field, several joined with errors.Join.
func Parse(name string, src []byte, opts ...Option) (*Set, error) {
	o := options{algorithm: DefaultAlgorithm}
	for _, opt := range opts {
		opt(&o)
	}
	if !slices.Contains(algorithms.Algorithms(), o.algorithm) {
		return nil, &Error{File: name, Message: fmt.Sprintf("default algorithm %q is not one of %s", o.algorithm,
			strings.Join(algorithms.Algorithms(), ", "))}
	}
	root, err := decode(name, src)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(src)
	p := &parser{file: name, o: o, set: &Set{File: name, Version: hex.EncodeToString(sum[:6]), gateway: o.gateway}}
	p.root(root)
	if len(p.errs) == 0 {
		p.crossCheck(deref(root))
	}
	if len(p.errs) > 0 {
		return nil, p.joined()
	}
	p.set.index()
	return p.set, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode parses src as one YAML document and returns its root node.
func decode(name string, src []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Message: "empty: a rules file gives a domain and descriptors"}
		}
		return nil, syntaxError(name, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{File: name, Line: next.Line, Message: "a second YAML document: a rules file holds one"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(name, err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Message: "empty: a rules file gives a domain and descriptors"}
	}
	return doc.Content[0], nil
}

func syntaxError(name string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: name, Line: line, Message: "not valid YAML: " + m[2]}
	}
	return &Error{File: name, Message: "not valid YAML: " + msg}
}

type parser struct {
	file  string
	o     options
	set   *Set
	errs  []*Error
	nodes int
}

func (p *parser) errorf(n *yaml.Node, field, format string, a ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: field, Message: fmt.Sprintf(format, a...)})
}

// joined is the errors in line order, at most maxErrors of them.
func (p *parser) joined() error {
	slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
	errs := make([]error, 0, maxErrors+1)
	for i, e := range p.errs {
		if i == maxErrors {
			errs = append(errs, &Error{File: p.file, Message: fmt.Sprintf("and %d more mistakes", len(p.errs)-maxErrors)})
			break
		}
		errs = append(errs, e)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// field is one field of a mapping: its name's node and its value's.
type field struct{ key, val *yaml.Node }

// mapping reads n's fields by name, refusing what is not a mapping, a field
// given twice and a field not in known.
func (p *parser) mapping(n *yaml.Node, path string, known []string) (map[string]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of fields, got %s", kindOf(n))
		return nil, false
	}
	fields := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			if k.Tag == "!!merge" {
				p.errorf(k, path, "merge keys (<<) are not read: write the fields out")
			} else {
				p.errorf(k, path, "a field's name must be a string (got %s)", kindOf(k))
			}
			continue
		}
		name := k.Value
		if first, ok := fields[name]; ok {
			p.errorf(k, join(path, name), "given twice (first at line %d)", first.key.Line)
			continue
		}
		if !slices.Contains(known, name) {
			p.errorf(k, join(path, name), "unknown field%s", suggest(name, known))
			continue
		}
		fields[name] = field{k, v}
	}
	return fields, true
}

// suggest offers the known name that name most likely meant.
func suggest(name string, known []string) string {
	squash := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' || r == ' ' {
				return -1
			}
			return r
		}, strings.ToLower(s))
	}
	for _, k := range known {
		if squash(k) == squash(name) || distance(k, name) <= 2 {
			return fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
}

// distance is the Levenshtein distance between a and b, for short names.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return len(a) + len(b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// text reads a scalar as its text: null is empty.
func (p *parser) text(f field, path string) (string, bool) {
	n := deref(f.val)
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "want a string, got %s", kindOf(n))
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (p *parser) boolean(f field, path string) (bool, bool) {
	n := deref(f.val)
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n, path, "want true or false, got %s", kindOf(n))
		return false, false
	}
	return b, true
}

func (p *parser) integer(f field, path string) (int64, bool) {
	n := deref(f.val)
	var i int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
		p.errorf(n, path, "%s is not a whole number", kindOf(n))
		return 0, false
	}
	return i, true
}

func (p *parser) sequence(f field, path string) ([]*yaml.Node, bool) {
	n := deref(f.val)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list, got %s", kindOf(n))
		return nil, false
	}
	return n.Content, true
}

func (p *parser) root(n *yaml.Node) {
	fields, ok := p.mapping(n, "", rootFields)
	if !ok {
		return
	}
	if f, ok := fields["domain"]; !ok {
		p.errorf(n, "domain", "missing: a rules file names its domain")
	} else if d, ok := p.text(f, "domain"); ok {
		if d == "" {
			p.errorf(f.key, "domain", "is empty: a rules file names its domain")
		}
		p.set.Domain = d
	}
	if f, ok := fields["descriptors"]; ok {
		p.set.Descriptors = p.descriptors(f, "descriptors", nil, 1)
	}
}

// descriptors reads a list of descriptors at depth (1 at the top).
func (p *parser) descriptors(f field, path string, parent *Descriptor, depth int) []*Descriptor {
	list, ok := p.sequence(f, path)
	if !ok {
		return nil
	}
	if len(list) > 0 && depth > maxDepth {
		p.errorf(f.key, path, "descriptors nested deeper than %d levels", maxDepth)
		return nil
	}
	var ds []*Descriptor
	seen := map[string]*Descriptor{}
	read := map[Entry]*Descriptor{}
	for i, n := range list {
		if p.nodes++; p.nodes > maxDescriptors {
			p.errorf(n, path, "more than %d descriptors", maxDescriptors)
			return ds
		}
		d := p.descriptor(n, fmt.Sprintf("%s[%d]", path, i), parent, depth)
		if d == nil {
			continue
		}
		// As envoyproxy/ratelimit: siblings are told apart by key, or
		// key_value when there is a value.
		if first, ok := seen[d.composite()]; ok {
			p.errorf(n, d.Field, "duplicate descriptor composite key %q (%s, line %d, has the same key and value)",
				p.set.Domain+"."+d.fullKey(), first.Field, first.Line)
			continue
		}
		seen[d.composite()] = d
		// The gateway reads header names in any case, and hosts in lower case.
		if p.o.gateway {
			same := Entry{d.attr.String(), d.attr.normalize(d.Value)}
			if first, ok := read[same]; ok {
				p.errorf(n, d.Field, "matches the same requests as %s (line %d): %s = %q", first.Field, first.Line, same.Key, d.Value)
				continue
			}
			read[same] = d
		}
		ds = append(ds, d)
	}
	return ds
}

// composite is the node's name among its siblings, as envoyproxy/ratelimit
// keys them: key, or key_value.
func (d *Descriptor) composite() string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "_" + d.Value
}

// fullKey is the composite names from the top down to d, joined by dots.
func (d *Descriptor) fullKey() string {
	if d.Parent == nil {
		return d.composite()
	}
	return d.Parent.fullKey() + "." + d.composite()
}

func (p *parser) descriptor(n *yaml.Node, path string, parent *Descriptor, depth int) *Descriptor {
	fields, ok := p.mapping(n, path, descriptorFields)
	if !ok {
		return nil
	}
	errs := len(p.errs)
	d := &Descriptor{Parent: parent, Line: deref(n).Line, Field: path}
	if f, ok := fields["key"]; !ok {
		p.errorf(n, join(path, "key"), "missing: every descriptor has a key")
	} else if k, ok := p.text(f, join(path, "key")); ok {
		d.Key = k
		p.checkKey(d, f)
	}
	if f, ok := fields["value"]; ok {
		if v, ok := p.text(f, join(path, "value")); ok {
			d.Value = v
			p.checkValue(d, f)
		}
	}
	_, wild := d.Prefix()
	d.perValue = (d.Value == "" || wild) && !(p.o.gateway && d.attr.Kind == KindGeneric)
	for _, name := range []string{"shadow_mode", "detailed_metric"} {
		if f, ok := fields[name]; ok {
			b, _ := p.boolean(f, join(path, name))
			if name == "shadow_mode" {
				d.ShadowMode = b
			} else {
				d.DetailedMetric = b
			}
		}
	}
	for _, name := range notImplemented {
		if f, ok := fields[name]; ok {
			if on, ok := p.boolean(f, join(path, name)); ok && on {
				p.errorf(f.key, join(path, name), "envoyproxy/ratelimit's %s is not implemented by ratelab", name)
			}
		}
	}
	if f, ok := fields["fallback_key"]; ok {
		p.fallback(d, f)
	}
	one, hasOne := fields["rate_limit"]
	many, hasMany := fields["rate_limits"]
	switch {
	case hasOne && hasMany:
		p.errorf(many.key, join(path, "rate_limits"), "give rate_limit or rate_limits, not both")
	case hasOne:
		if l := p.limit(one.val, join(path, "rate_limit"), d); l != nil {
			d.Limits = append(d.Limits, l)
		}
	case hasMany:
		list, ok := p.sequence(many, join(path, "rate_limits"))
		if ok && len(list) == 0 {
			p.errorf(many.key, join(path, "rate_limits"), "an empty list: give a limit, or leave rate_limits out")
		}
		for i, ln := range list {
			if l := p.limit(ln, fmt.Sprintf("%s.rate_limits[%d]", path, i), d); l != nil {
				d.Limits = append(d.Limits, l)
			}
		}
	}
	if f, ok := fields["descriptors"]; ok {
		d.Descriptors = p.descriptors(f, join(path, "descriptors"), d, depth+1)
	}
	if len(p.errs) > errs {
		return nil
	}
	return d
}

// checkKey refuses an empty key, a wildcard in a key, and in the gateway a
// key it cannot read.
func (p *parser) checkKey(d *Descriptor, f field) {
	path := join(d.Field, "key")
	switch {
	case d.Key == "":
		p.errorf(f.key, path, "is empty: every descriptor has a key")
		return
	case strings.Contains(d.Key, "*"):
		p.errorf(f.val, path, "%q: a wildcard (*) may only end a value, never be in a key", d.Key)
		return
	}
	a, err := parseAttribute(d.Key)
	if err == nil {
		d.attr = a
	}
	if p.o.gateway && err != nil {
		p.errorf(f.val, path, "%s", err)
	}
}

// checkValue refuses a wildcard anywhere but at the end, and in the
// gateway a value its key never has.
func (p *parser) checkValue(d *Descriptor, f field) {
	path := join(d.Field, "value")
	if i := strings.Index(d.Value, "*"); i >= 0 && i != len(d.Value)-1 {
		p.errorf(f.val, path, "%q: a wildcard (*) may only end a value, as a prefix", d.Value)
		return
	}
	if !p.o.gateway {
		return
	}
	v, _ := d.Prefix()
	switch d.attr.Kind {
	case KindPath:
		if !strings.HasPrefix(v, "/") {
			p.errorf(f.val, path, "%q: a path starts with /", d.Value)
		}
	case KindMethod:
		if v != strings.ToUpper(v) {
			p.errorf(f.val, path, "%q: methods are matched as sent, in capitals (%s)", d.Value, strings.ToUpper(v))
		}
	}
}

// fallback reads fallback_key: what the gateway reads when a request has
// no value for a header or query parameter (ip, for a consumer header).
func (p *parser) fallback(d *Descriptor, f field) {
	path := join(d.Field, "fallback_key")
	k, ok := p.text(f, path)
	if !ok {
		return
	}
	a, err := parseAttribute(k)
	switch {
	case !p.o.gateway:
		p.errorf(f.key, path, "is read only by the gateway (Envoy sends every entry it has)")
	case err != nil:
		p.errorf(f.val, path, "%s", err)
	case d.attr.Kind != KindHeader && d.attr.Kind != KindQuery:
		p.errorf(f.key, path, "only a header or a query parameter can be missing: %q always has a value", d.Key)
	case d.Value != "":
		p.errorf(f.key, path, "only a descriptor with no value has a fallback (a value %q is matched, not counted per value)", d.Value)
	case a.Kind == KindGeneric || a == d.attr:
		p.errorf(f.val, path, "%q: a fallback is another attribute of the request", k)
	default:
		d.FallbackKey, d.fallback = a.String(), a
	}
}

var nameOK = regexp.MustCompile(`^[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}$`)

func (p *parser) limit(n *yaml.Node, path string, d *Descriptor) *Limit {
	fields, ok := p.mapping(n, path, limitFields)
	if !ok {
		return nil
	}
	errs := len(p.errs)
	l := &Limit{Descriptor: d, Line: deref(n).Line, Field: path, Cost: 1, Shadow: d.ShadowMode, Algorithm: p.o.algorithm}
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
	if l.Unlimited {
		for _, name := range []string{"unit", "window", "unit_multiplier", "requests_per_unit", "algorithm", "cost"} {
			if f, ok := fields[name]; ok {
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
		if f, ok := fields["cost"]; ok {
			if c, ok := p.integer(f, join(path, "cost")); ok {
				switch {
				case c < 0:
					p.errorf(f.val, join(path, "cost"), "must be 0 or more (got %d)", c)
				case l.Policy.Limit > 0 && c > l.Policy.Limit:
					p.errorf(f.val, join(path, "cost"), "%d is more than requests_per_unit (%d): no request could be admitted", c, l.Policy.Limit)
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
	if !ok {
		p.errorf(n, path, "missing: how many requests per window")
		return
	}
	r, ok := p.integer(f, path)
	if !ok {
		return
	}
	if r < 1 {
		hint := ""
		if r == 0 {
			hint = ": a limit that refuses every request (Envoy's 0) is not supported"
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
