package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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
	maxLimits      = 10000 // limits in the whole tree, each repetition of an alias counted
	// maxRateLimits bounds one rate_limits list, refused by its length
	// before any of it is read: one descriptor may hold all of a file's
	// limits.
	maxRateLimits = maxLimits
	maxReplaces   = 100 // names in one limit's replaces
	maxErrors     = 20  // mistakes reported at once
	maxWindow     = 365 * 24 * time.Hour
)

// Fields of each mapping.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "descriptors", "rate_limit", "rate_limits", "shadow_mode",
		"detailed_metric", "fallback_key", "quota_mode", "value_to_metric", "share_threshold"}
	limitFields = []string{"name", "unit", "requests_per_unit", "unlimited", "replaces", "algorithm", "window",
		"unit_multiplier", "cost", "shadow_mode", "burst", "in_flight", "lease"}
	replacesFields = []string{"name"}
	// envoyFields are the fields envoyproxy/ratelimit accepts (its
	// config_impl.go's validKeys), in any mapping: where it does not read
	// one, it ignores it, and so does ForService, with a warning.
	envoyFields = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
		"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}
)

// Parse reads a rules file: name is what errors call it (its path), src
// its bytes. The result is checked; every mistake is an *Error naming the
// line and the field, several joined with errors.Join.
func Parse(name string, src []byte, opts ...Option) (*Set, error) {
	o, err := newOptions(name, opts)
	if err != nil {
		return nil, err
	}
	p, err := read(File{Name: name, Src: src}, o)
	if err != nil {
		return nil, err
	}
	return p.finish()
}

func newOptions(name string, opts []Option) (options, error) {
	o := options{algorithm: DefaultAlgorithm}
	for _, opt := range opts {
		opt(&o)
	}
	if !slices.Contains(algorithms.Algorithms(), o.algorithm) {
		return o, &Error{File: name, Message: fmt.Sprintf("default algorithm %q is not one of %s", o.algorithm,
			strings.Join(algorithms.Algorithms(), ", "))}
	}
	return o, nil
}

// read reads one file's tree, each field checked; what needs the whole
// tree of a domain, which may be merged from several files, is finish's.
func read(f File, o options) (*parser, error) {
	root, err := decode(f.Name, f.Src)
	if err != nil {
		return nil, err
	}
	p := &parser{file: f.Name, o: o, rootLine: deref(root).Line, sums: [][sha256.Size]byte{sha256.Sum256(f.Src)},
		set: &Set{File: f.Name, Files: []string{f.Name}, gateway: o.gateway}}
	p.root(root)
	if len(p.errs) > 0 {
		return nil, p.joined()
	}
	return p, nil
}

// finish checks the tree as a whole and indexes it.
func (p *parser) finish() (*Set, error) {
	p.crossCheck()
	if len(p.errs) > 0 {
		return nil, p.joined()
	}
	p.set.Version = version(p.sums)
	p.set.index()
	p.sort(p.warns)
	p.set.Warnings = p.warns
	return p.set, nil
}

// version is a short hash of a set's files (12 hex digits): a file's own
// hash when it is one.
func version(sums [][sha256.Size]byte) string {
	sum := sums[0]
	if len(sums) > 1 {
		h := sha256.New()
		for _, s := range sums {
			h.Write(s[:])
		}
		h.Sum(sum[:0])
	}
	return hex.EncodeToString(sum[:6])
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
		p.set.Domain, p.domainLine = d, f.key.Line
	}
	p.top = &siblings{}
	if f, ok := fields["descriptors"]; ok {
		p.set.Descriptors = p.descriptors(f, "descriptors", nil, 1)
	}
}

// merge adds the descriptors of q, a later file of the same domain, to
// the top level of p's, as envoyproxy/ratelimit merges a domain's files:
// one that repeats a key and value of the top level is a mistake of q's.
func (p *parser) merge(q *parser) {
	for _, d := range q.set.Descriptors {
		if q.sibling(p.top, d, d.Line) {
			p.set.Descriptors = append(p.set.Descriptors, d)
		}
	}
	p.errs, p.warns = append(p.errs, q.errs...), append(p.warns, q.warns...)
	p.set.Files, p.sums = append(p.set.Files, q.file), append(p.sums, q.sums...)
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
	level := &siblings{}
	if depth == 1 {
		level = p.top
	}
	for i, n := range list {
		if p.nodes++; p.nodes > maxDescriptors {
			p.errorf(n, path, "more than %d descriptors", maxDescriptors)
			return ds
		}
		d := p.descriptor(n, fmt.Sprintf("%s[%d]", path, i), parent, depth)
		if d != nil && p.sibling(level, d, n.Line) {
			ds = append(ds, d)
		}
	}
	return ds
}

// siblings are the descriptors of one level read so far.
type siblings struct {
	composite map[string]*Descriptor
	read      map[Entry]*Descriptor // the gateway's: an attribute and a value it reads
}

// sibling adds d, at line, to its level, and reports whether it may be
// there: as envoyproxy/ratelimit, siblings are told apart by key, or
// key_value when there is a value; and the gateway reads header names in
// any case, and hosts in lower case.
func (p *parser) sibling(level *siblings, d *Descriptor, line int) bool {
	if first, ok := level.composite[d.composite()]; ok {
		p.errorAt(line, d.Field, "duplicate descriptor composite key %q (%s, %s, has the same key and value)",
			p.set.Domain+"."+d.fullKey(), first.Field, lineIn(first.File, first.Line, p.file))
		return false
	}
	if level.composite == nil {
		level.composite, level.read = map[string]*Descriptor{}, map[Entry]*Descriptor{}
	}
	level.composite[d.composite()] = d
	if !p.o.gateway {
		return true
	}
	same := Entry{d.attr.String(), d.attr.normalize(d.Value)}
	if first, ok := level.read[same]; ok {
		p.errorAt(line, d.Field, "matches the same requests as %s (%s): %s = %q", first.Field, lineIn(first.File, first.Line, p.file),
			same.Key, d.Value)
		return false
	}
	level.read[same] = d
	return true
}

// lineIn names a line of file, in a message about a place in from: with
// the file's name when it is another.
func lineIn(file string, line int, from string) string {
	if file == from {
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("line %d of %s", line, file)
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
	d := &Descriptor{Parent: parent, File: p.file, Line: deref(n).Line, Field: path}
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
	if f, ok := fields["share_threshold"]; ok {
		p.shareThreshold(d, f)
	}
	_, wild := d.Prefix()
	d.perValue = (d.Value == "" || wild) && !(p.o.gateway && d.attr.Kind == KindGeneric) && !d.ShareThreshold
	for _, flag := range []struct {
		name string
		b    *bool
	}{{"shadow_mode", &d.ShadowMode}, {"quota_mode", &d.QuotaMode}, {"detailed_metric", &d.DetailedMetric}} {
		if f, ok := fields[flag.name]; ok {
			*flag.b, _ = p.boolean(f, join(path, flag.name))
		}
	}
	if f, ok := fields["value_to_metric"]; ok {
		if on, ok := p.boolean(f, join(path, "value_to_metric")); ok && on {
			p.warnf(f.key, join(path, "value_to_metric"), "ignored: it names envoyproxy/ratelimit's statistics by the values sent; "+
				"ratelab's metrics are per limit")
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
	case hasOne && p.o.service && null(one.val):
		// envoyproxy/ratelimit: no limit, as when rate_limit is left out
	case hasOne:
		if p.countLimit(one.key, join(path, "rate_limit")) {
			p.addLimit(d, p.limit(one.val, join(path, "rate_limit"), d))
		}
	case hasMany:
		p.rateLimits(d, many)
	}
	if f, ok := fields["descriptors"]; ok {
		d.Descriptors = p.descriptors(f, join(path, "descriptors"), d, depth+1)
	}
	if len(p.errs) > errs {
		return nil
	}
	return d
}

// rateLimits reads a rate_limits list of limits, in bounds: the list's own
// and the file's.
func (p *parser) rateLimits(d *Descriptor, f field) {
	path := join(d.Field, "rate_limits")
	list, ok := p.sequence(f, path)
	switch {
	case !ok:
		return
	case len(list) == 0:
		p.errorf(f.key, path, "an empty list: give a limit, or leave rate_limits out")
		return
	case len(list) > maxRateLimits:
		p.errorf(f.key, path, "%d limits: a list holds at most %d", len(list), maxRateLimits)
		return
	}
	for i, n := range list {
		if !p.countLimit(f.key, path) {
			return
		}
		p.addLimit(d, p.limit(n, fmt.Sprintf("%s[%d]", path, i), d))
	}
}

// countLimit counts one more limit of the file, and reports whether it is
// within maxLimits; the first one past it is a mistake of the field at n.
func (p *parser) countLimit(n *yaml.Node, path string) bool {
	if p.limits++; p.limits <= maxLimits {
		return true
	}
	if p.limits == maxLimits+1 {
		p.errorf(n, path, "more than %d limits in the file (each repetition of an alias counts)", maxLimits)
	}
	return false
}

// addLimit adds l, when it was read without a mistake, to d's limits.
func (p *parser) addLimit(d *Descriptor, l *Limit) {
	if l != nil {
		l.index = len(d.Limits)
		d.Limits = append(d.Limits, l)
	}
}

// shareThreshold reads share_threshold, which only a prefix may set, as
// envoyproxy/ratelimit has it.
func (p *parser) shareThreshold(d *Descriptor, f field) {
	path := join(d.Field, "share_threshold")
	on, ok := p.boolean(f, path)
	if !ok || !on {
		return
	}
	if _, wild := d.Prefix(); !wild {
		p.errorf(f.key, path, "only a value ending in * shares one counter among the values it matches (this descriptor's value is %q)", d.Value)
		return
	}
	d.ShareThreshold = true
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
		if !p.o.service {
			p.errorf(f.val, path, "%q: a wildcard (*) may only end a value, as a prefix", d.Value)
			return
		}
		p.warnf(f.val, path, "%q: matched as written, * included, as envoyproxy/ratelimit matches it: "+
			"only a * that ends a value is a wildcard", d.Value)
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
