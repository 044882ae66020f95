package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// File is one file of a configuration: the name errors call it (its
// path) and its bytes.
type File struct {
	// Name is what errors call the file.
	Name string
	// Src is its bytes.
	Src []byte
}

// Config is the rule sets of a configuration of several files, such as
// the directory envoyproxy/ratelimit's service reads: one Set per domain.
type Config struct {
	// Sets are the rule sets by domain.
	Sets map[string]*Set
	// Warnings are every set's warnings, the sets in the order of their
	// first files.
	Warnings []*Error
	// Version names the configuration: a short hash (12 hex digits) of each
	// file's base name with the hash of its bytes, in name order, so that
	// the same files in another directory have the same version.
	Version string
}

// ParseConfig reads the files of a configuration, each as Parse reads one,
// with one domain in each file; with MergeDomains, several files of one
// domain make one Set. Every mistake is an *Error naming its file, line and
// field (a domain in two files names both), all of them joined with
// errors.Join, in the order of the files. No files is a Config with no
// sets: whether that is a mistake is the caller's to say.
func ParseConfig(files []File, opts ...Option) (*Config, error) {
	o, err := newOptions("", opts)
	if err != nil {
		return nil, err
	}
	var errs []error
	var order []*parser
	domains := map[string]*parser{}
	versions := make([]string, 0, len(files))
	for _, f := range files {
		sum := sha256.Sum256(f.Src)
		versions = append(versions, filepath.Base(f.Name)+"="+hex.EncodeToString(sum[:6]))
		q, err := read(f, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, ok := domains[q.set.Domain]
		switch {
		case !ok:
			domains[q.set.Domain] = q
			order = append(order, q)
		case o.merge:
			p.merge(q)
		default:
			errs = append(errs, &Error{File: q.file, Line: q.domainLine, Field: "domain", Message: fmt.Sprintf(
				"%q is also the domain of %s: a domain is in one file, unless the files of a domain are merged", q.set.Domain, p.file)})
		}
	}
	c := &Config{Sets: make(map[string]*Set, len(order))}
	for _, p := range order {
		s, err := p.finish()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.Sets[s.Domain] = s
		c.Warnings = append(c.Warnings, s.Warnings...)
	}
	if len(errs) > 0 {
		return nil, joinInOrder(errs, files)
	}
	slices.Sort(versions)
	sum := sha256.Sum256([]byte(strings.Join(versions, "\n")))
	c.Version = hex.EncodeToString(sum[:6])
	return c, nil
}

// MergeDomains has ParseConfig merge the files of one domain, as
// envoyproxy/ratelimit does with MERGE_DOMAIN_CONFIG=true: each later
// file's top-level descriptors join the first file's, and one whose key
// and value the top level already has is a mistake. Without it, two files
// of one domain are a mistake. Parse, which reads one file, ignores it.
func MergeDomains() Option { return func(o *options) { o.merge = true } }

// joinInOrder joins the mistakes of several files, each file's already
// joined, into one list in the order of the files.
func joinInOrder(errs []error, files []File) error {
	var flat []error
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			flat = append(flat, j.Unwrap()...)
		} else {
			flat = append(flat, err)
		}
	}
	at := func(err error) int {
		var e *Error
		if !errors.As(err, &e) {
			return len(files)
		}
		return slices.IndexFunc(files, func(f File) bool { return f.Name == e.File })
	}
	slices.SortStableFunc(flat, func(a, b error) int { return at(a) - at(b) })
	if len(flat) == 1 {
		return flat[0]
	}
	return errors.Join(flat...)
}
