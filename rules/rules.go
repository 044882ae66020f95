// Package rules is ratelab's one model of rate-limit rules: a tree of
// descriptors, as in envoyproxy/ratelimit's configuration, whose nodes
// carry limits. The gateway, the audit and the Envoy rate limit service read
// the same Set.
//
// A rules file is envoyproxy/ratelimit's YAML, extended (docs/rules.md):
// several limits on a node (rate_limits), any window, one of ratelab's
// algorithms per limit, a cost per request, shadow mode per limit. Parse
// reads one and checks it; every mistake names its file, line and field.
//
// Two ways to find the limits that apply:
//   - Match, for the gateway: a request meets every node with limits that
//     the walk of the tree reaches, by its method, path, host, headers,
//     query and address (the descriptor keys name them);
//   - Lookup, for Envoy's rate limit service: one descriptor's entries,
//     walked exactly as envoyproxy/ratelimit does.
//
// The package imports algorithms (the policy, the algorithm names, the Redis
// key shape) and nothing that touches Redis or HTTP. A Set is read-only once
// parsed: it is safe for concurrent use, and a reload swaps one Set for
// another.
package rules

import (
	"fmt"
	"strings"

	"github.com/ratelab/ratelab/algorithms"
)

// DefaultAlgorithm is the algorithm of a limit that names none, unless
// Parse is given WithDefaultAlgorithm.
const DefaultAlgorithm = "sliding-log"

// Set is a parsed and checked rules file. Its fields and everything they
// point to are read-only.
type Set struct {
	// File is the name the rules were parsed under (the file's path); the
	// first of Files.
	File string
	// Files are the names of the files the set was read from: File alone,
	// or a domain's files in the order ParseConfig merged them
	// (MergeDomains).
	Files []string
	// Domain is the file's domain: every counter key starts from it.
	Domain string
	// Version is a short hash of the source (12 hex digits): two files with
	// the same bytes have the same version. A set merged from several files
	// has a hash of theirs, in order.
	Version string
	// Descriptors is the top level of the tree, in file order.
	Descriptors []*Descriptor
	// Warnings are what the files hold that ratelab accepts but does not
	// do as written: value_to_metric, and for ForService a * matched as
	// itself, a domain with no limits, a field envoyproxy/ratelimit ignores.
	// Each names its file, line and field, in the order of Files and of
	// lines; none when there is nothing to say.
	Warnings []*Error

	gateway    bool
	limits     []*Limit
	root       level
	domainTag  string
	replaceAny bool        // some limit replaces another: Match filters
	attrs      []Attribute // every attribute the gateway reads for the set, once
}

// Descriptor is one node of the tree: a key, optionally a value, the limits
// it carries and the nodes nested under it.
type Descriptor struct {
	// Key names what the node matches on. In the gateway: remote_address,
	// method, path, host, header:NAME, query:NAME or generic_key; in Envoy's
	// rate limit service, any descriptor key.
	Key string
	// Value is the value the node matches exactly; a value ending in * is a
	// prefix; empty matches any value (the key alone).
	Value string
	// FallbackKey is, for a node keyed by a header or a query parameter with
	// no value, the key read instead when a request has none (gateway only;
	// empty when not given).
	FallbackKey string
	// Limits are the node's limits (rate_limit, or rate_limits), in file
	// order; none for a node that only nests others or exempts a value.
	Limits []*Limit
	// Descriptors are the nodes nested under this one, in file order.
	Descriptors []*Descriptor
	// Parent is the node this one is nested under; nil at the top level.
	Parent *Descriptor
	// ShareThreshold (share_threshold, on a prefix only) has every value the
	// prefix matches share one counter of each limit, as
	// envoyproxy/ratelimit's share_threshold: the hits' entries hold the
	// value as written (files/*) in place of the value met, and the node is
	// not PerValue.
	ShareThreshold bool
	// ShadowMode puts every limit of the node in shadow mode.
	ShadowMode bool
	// QuotaMode (envoyproxy/ratelimit's quota_mode) puts every limit of the
	// node in quota mode (Limit.Quota).
	QuotaMode bool
	// DetailedMetric is Envoy's detailed_metric, kept for the rate limit
	// service's statistics.
	DetailedMetric bool
	// File is the file the node is in: one of its set's Files.
	File string
	// Line is the line of the node in the file.
	Line int
	// Field is the node's place in the file, as errors name it:
	// descriptors[0].descriptors[1].
	Field string

	attr            Attribute
	fallback        Attribute
	perValue        bool   // each value its own counters (see PerValue)
	prefix          string // a prefix's value without the *, as the gateway compares it
	compositePrefix string // a prefix's composite key without the *, as Lookup compares it
	children        level
}

// entryKey is the key of the node's entries in the gateway: the
// attribute's canonical form; elsewhere the key as written.
func (d *Descriptor) entryKey() string {
	if d.attr.Kind != KindNone {
		return d.attr.String()
	}
	return d.Key
}

// Prefix reports whether Value is a prefix (ends in *), and returns the
// prefix without the *.
func (d *Descriptor) Prefix() (string, bool) {
	return strings.CutSuffix(d.Value, "*")
}

// PerValue reports whether each value of the key gets counters of its own
// under this node: the key alone, or a prefix that does not share its
// counter (ShareThreshold). An exact value is one fixed value, and so, in
// the gateway, is generic_key's.
func (d *Descriptor) PerValue() bool { return d.perValue }

// Attribute says where the gateway reads the node's key: the Kind of
// attribute and, for a header or a query parameter, its Name (a header's
// canonical form). The zero Attribute is a key the gateway cannot read.
func (d *Descriptor) Attribute() Attribute { return d.attr }

// Limit is one limit on a node.
type Limit struct {
	// ID names the limit uniquely in its Set: Name, or when the file gives
	// none, a name made from its place in the tree (key_value.key, with #N
	// for the Nth unnamed limit of a rate_limits list). Counter keys,
	// headers and metrics use it.
	ID string
	// Name is the name the file gives; empty when none. replaces names it.
	Name string
	// Policy is Limit requests per Window; zero when Unlimited.
	Policy algorithms.Policy
	// Unit is the unit the window was given in (second, minute, hour, day,
	// week, month, year) when it is one whole unit; empty otherwise.
	Unit string
	// Algorithm is one of algorithms.Algorithms(), or algorithms.InFlight
	// for an in-flight limit (InFlight).
	Algorithm string
	// InFlight limits bound the requests in flight at once, rather than
	// per window: Policy.Limit slots (in_flight), each held until the
	// request ends or its lease, Policy.Window (lease), runs out.
	InFlight bool
	// Cost is what one request takes from the limit: 1 by default; 0 checks
	// without consuming.
	Cost int64
	// Shadow limits are counted and never block.
	Shadow bool
	// Quota limits are in envoyproxy/ratelimit's quota mode, which answers
	// as shadow mode does: counted, reported (OK, with the limit and what
	// remains of it), never over the limit. Such a limit is Shadow too; Quota
	// tells the two apart.
	Quota bool
	// Unlimited limits are answered without Redis: always admitted.
	Unlimited bool
	// Blocks is a limit of requests_per_unit 0 (ForService only): answered
	// without Redis, over the limit for every request (one of hits_addend 0
	// too, which asks whether one more would be admitted).
	// Its Policy holds the window and a Limit of 0.
	Blocks bool
	// Replaces names the limits this one replaces when a request meets both.
	Replaces []string
	// Descriptor is the node the limit is on.
	Descriptor *Descriptor
	// Line is the line of the limit in the file.
	Line int
	// Field is the limit's place in the file: descriptors[0].rate_limits[1].
	Field string

	domain        string
	tagKey        string // the key whose value tags its counters; "" for the domain
	index         int    // its place in Descriptor.Limits
	nameLine      int
	replacesLines []int
}

// file is the file the limit is in.
func (l *Limit) file() string { return l.Descriptor.File }

// TagKey is the key whose value, on the limit's path, makes the Cluster hash
// tag of its counters: the first key with a value per request (the key alone
// or a prefix that does not share its counter: Descriptor.PerValue). Empty
// when the path has none: then every request that meets the limit shares
// one counter, tagged by the domain.
func (l *Limit) TagKey() string { return l.tagKey }

// Global reports whether every request that meets the limit shares one
// counter (its path has only fixed values, as a global cap's): on a Redis
// Cluster it lives in the domain's slot, apart from per-client limits.
func (l *Limit) Global() bool { return l.tagKey == "" }

// Entry is one key and value of a descriptor, as Envoy sends them, or as a
// request supplied them on a matched path.
type Entry struct {
	Key   string
	Value string
}

// Hit is one limit that a request (or a descriptor) meets.
type Hit struct {
	// Limit is the limit met.
	Limit *Limit
	// Entries are the path's keys with the values of the request, from the
	// top of the tree down to the limit's node; where a prefix shares its
	// counter (Descriptor.ShareThreshold), the prefix as written (files/*).
	// They name the counter.
	Entries []Entry
	// Key is the Redis key of the limit's counter for these entries, the
	// base its algorithm derives its keys from: algorithms.Key(Tag,
	// <128-bit hash of the domain and entries>:<ID>:<algorithm>), at most
	// 140 bytes whatever the values. Empty for an unlimited limit, which
	// never reaches Redis.
	Key string
	// Tag is the Cluster hash tag in Key (16 hex digits): a hash of the value
	// of the limit's TagKey, or of the domain for a global limit. Hits with
	// one tag can be decided in one call on a Cluster.
	Tag string
	// ReplacedBy is, for a hit that Explain reports as replaced, the ID of
	// a limit met by the same request that replaces it.
	ReplacedBy string
}

// shareIn writes, into the entries of a path to d (one entry a level), the
// value of every node on it that shares its counter among the values it
// matches.
func (d *Descriptor) shareIn(entries []Entry) {
	for n, i := d, len(entries)-1; n != nil && i >= 0; n, i = n.Parent, i-1 {
		if n.ShareThreshold {
			entries[i].Value = n.Value
		}
	}
}

// Label is the counter in readable form: the domain, each entry as
// key=value, and the limit's ID, joined by /; control characters and braces
// replaced, and at most 160 bytes.
func (h Hit) Label() string {
	var b strings.Builder
	if h.Limit != nil {
		b.WriteString(h.Limit.domain)
	}
	for _, e := range h.Entries {
		b.WriteString("/")
		b.WriteString(e.Key)
		b.WriteString("=")
		b.WriteString(e.Value)
	}
	b.WriteString("/")
	if h.Limit != nil {
		b.WriteString(h.Limit.ID)
	}
	return printable(b.String(), 160)
}

// printable replaces control characters and braces in s with _, and cuts it
// to at most n bytes of valid UTF-8 (… marks a cut).
func printable(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n-len("…")], "") + "…"
	}
	return s
}

// Error is a mistake in a rules file: where it is and what is wrong.
type Error struct {
	// File is the file's name, as given to Parse.
	File string
	// Line is the line of the mistake, from 1; 0 when unknown.
	Line int
	// Field is where in the file: descriptors[0].rate_limit.unit; empty for
	// the file as a whole. For a Shorthand, the Shorthand's field (Limits,
	// KeyBy, Algorithm).
	Field string
	// Message says what is wrong, in lower case.
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Option tunes Parse.
type Option func(*options)

type options struct {
	gateway   bool
	service   bool
	merge     bool
	algorithm string
}

// ForService checks the file for Envoy's rate limit service (ratelab rls),
// accepting what envoyproxy/ratelimit accepts: requests_per_unit 0, a limit
// that refuses every request that adds a hit (Limit.Blocks), and so a
// missing requests_per_unit; a * inside a value, matched as itself; a
// domain with no limits; any of its fields where it ignores them, and an
// unlimited limit's requests_per_unit; YAML 1.1's booleans (yes, no, on,
// off, y, n; null is false) and a null rate_limit (none). What is not done
// as written is said in a warning (Set.Warnings).
func ForService() Option { return func(o *options) { o.service = true } }

// ForGateway checks the file for ratelab's HTTP gateway: every key must be
// one the gateway reads from a request (remote_address, method, path, host,
// header:NAME, query:NAME, generic_key). Without it any key is accepted, as
// Envoy's rate limit service accepts any descriptor key.
func ForGateway() Option { return func(o *options) { o.gateway = true } }

// WithDefaultAlgorithm sets the algorithm of limits that name none
// (DefaultAlgorithm otherwise).
func WithDefaultAlgorithm(name string) Option { return func(o *options) { o.algorithm = name } }

// Limits lists every limit of the set, in file order.
func (s *Set) Limits() []*Limit { return s.limits }

// Gateway reports whether the set was checked for the gateway (ForGateway).
func (s *Set) Gateway() bool { return s.gateway }
