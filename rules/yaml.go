package rules

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/internal/edits"
	"go.yaml.in/yaml/v3"
)

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

// parser reads one file, and checks a domain's tree: one file's, or
// several merged into the first file's parser.
type parser struct {
	file       string
	o          options
	set        *Set
	top        *siblings // the top level's descriptors, which a merge adds to
	rootLine   int
	domainLine int
	sums       [][sha256.Size]byte // the hash of each file of the set
	errs       []*Error
	warns      []*Error
	nodes      int // descriptors read, each repetition of an alias counted
	limits     int // limits read, likewise
}

func (p *parser) errorf(n *yaml.Node, field, format string, a ...any) {
	p.errorAt(lineOf(n), field, format, a...)
}

func (p *parser) errorAt(line int, field, format string, a ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: field, Message: fmt.Sprintf(format, a...)})
}

// warnf notes what the file holds that ratelab accepts but does not do as
// it reads (Set.Warnings).
func (p *parser) warnf(n *yaml.Node, field, format string, a ...any) {
	p.warns = append(p.warns, &Error{File: p.file, Line: lineOf(n), Field: field, Message: fmt.Sprintf(format, a...)})
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// sort puts errors in the order of the set's files, and of lines in each.
func (p *parser) sort(errs []*Error) {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if c := slices.Index(p.set.Files, a.File) - slices.Index(p.set.Files, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
}

// joined is the errors in order (sort), at most maxErrors of them.
func (p *parser) joined() error {
	p.sort(p.errs)
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
			if p.o.service && slices.Contains(envoyFields, name) {
				if !nothing(v) {
					p.warnf(k, join(path, name), "ignored: envoyproxy/ratelimit accepts %s here and does nothing with it", name)
				}
				continue
			}
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
		if squash(k) == squash(name) || edits.Distance(k, name) <= 2 {
			return fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
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

// nothing reports whether n says nothing: null, or false.
func nothing(n *yaml.Node) bool {
	n = deref(n)
	var b bool
	return null(n) || n.Kind == yaml.ScalarNode && n.Tag == "!!bool" && n.Decode(&b) == nil && !b
}

func null(n *yaml.Node) bool {
	n = deref(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (p *parser) boolean(f field, path string) (bool, bool) {
	b, ok := p.flag(f.val)
	if !ok {
		n := deref(f.val)
		p.errorf(n, path, "want true or false, got %s", kindOf(n))
	}
	return b, ok
}

// flag reads n as a boolean: YAML's true or false, and for the rate limit
// service what envoyproxy/ratelimit's YAML 1.1 (gopkg.in/yaml.v2) reads as
// one too: null as false, and the words yes, no, on, off, y and n.
func (p *parser) flag(n *yaml.Node) (b, ok bool) {
	n = deref(n)
	switch {
	case n.Kind != yaml.ScalarNode:
		return false, false
	case n.Tag == "!!bool":
		return b, n.Decode(&b) == nil
	case !p.o.service:
		return false, false
	case n.Tag == "!!null":
		return false, true
	case n.Style != 0: // quoted: a string in YAML 1.1 too
		return false, false
	}
	switch n.Value {
	case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
		return true, true
	case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
		return false, true
	}
	return false, false
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
