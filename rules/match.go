package rules

import (
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
)

// Match returns the limits a request meets in the gateway, in file order,
// without those that another limit it meets replaces.
//
// The walk starts at the top of the tree. At each level, for each distinct
// key among the nodes there, it takes the request's value for that key (a
// request without one skips those nodes, unless the node names a
// fallback_key it has) and chooses one node: the exact value, else the first
// prefix that matches, else the key alone; then it goes on under that node.
// Every limit of every node reached applies. generic_key is always present:
// every generic_key node matches, with its own value.
//
// Match allocates the hits it returns and their keys, little else. A Set
// not parsed ForGateway is walked by the keys the gateway knows; its other
// nodes are never met.
func (s *Set) Match(r Request) []Hit {
	hits := s.walk(&r)
	if s.replaceAny {
		hits, _ = replace(hits, false)
	}
	return hits
}

// Explain is Match that also returns the limits the request met but that
// another replaced, each with ReplacedBy set.
func (s *Set) Explain(r Request) (applied, replaced []Hit) {
	return replace(s.walk(&r), true)
}

// Replace applies replaces across hits met by one request: a hit whose
// limit is named in another hit's replaces is dropped. It returns the hits
// kept and, with ReplacedBy set, those replaced. (The descriptors of a call
// to the rate limit service are LookupCall's, which keeps unlimited hits.)
func Replace(hits []Hit) (kept, replaced []Hit) {
	return replace(slices.Clone(hits), true)
}

// replace filters hits in place; the replaced ones are returned only when
// asked for. A replaced limit's own replaces still count, as
// envoyproxy/ratelimit counts them.
func replace(hits []Hit, keep bool) (kept, replaced []Hit) {
	return dropReplaced(hits, replacers(hits), keep, false)
}

// replacers maps each name that the limit of a hit among hits replaces to
// the ID of the first such limit; nil when none replaces any.
func replacers(hits ...[]Hit) map[string]string {
	var by map[string]string
	for _, hs := range hits {
		for _, h := range hs {
			for _, name := range h.Limit.Replaces {
				if by == nil {
					by = map[string]string{}
				}
				if _, ok := by[name]; !ok {
					by[name] = h.Limit.ID
				}
			}
		}
	}
	return by
}

// dropReplaced filters hits in place: a hit whose limit is named in by is
// dropped, and returned with ReplacedBy set when keep asks for it; but an
// unlimited one is kept when keepUnlimited says so.
func dropReplaced(hits []Hit, by map[string]string, keep, keepUnlimited bool) (kept, replaced []Hit) {
	if len(by) == 0 {
		return hits, nil
	}
	kept = hits[:0]
	for _, h := range hits {
		id, ok := by[h.Limit.Name]
		switch {
		case !ok || h.Limit.Name == "" || keepUnlimited && h.Limit.Unlimited:
			kept = append(kept, h)
		case keep:
			h.ReplacedBy = id
			replaced = append(replaced, h)
		}
	}
	return kept, replaced
}

// walker is one request's walk of the tree.
type walker struct {
	s       *Set
	r       Request
	entries [maxDepth]Entry
	hits    []Hit
	spare   []Entry // room for the hits' entries, taken a node at a time
}

func (s *Set) walk(r *Request) []Hit {
	w := walker{s: s, r: *r, hits: make([]Hit, 0, min(len(s.limits), 4))}
	w.level(&s.root, 0, 0, false)
	return w.hits
}

// level visits the nodes of lv that the request meets; tagAt is the index
// of the entry that tags counters, when tagged.
func (w *walker) level(lv *level, depth, tagAt int, tagged bool) {
	for gi := range lv.groups {
		g := &lv.groups[gi]
		if g.attr.Kind == KindGeneric {
			for _, d := range g.all {
				w.visit(d, Entry{Key: g.key, Value: d.Value}, depth, tagAt, tagged)
			}
			continue
		}
		v, ok := w.r.value(g.attr)
		if !ok {
			if d := g.keyOnly; d != nil && d.fallback.Kind != KindNone {
				if fv, ok := w.r.value(d.fallback); ok {
					w.visit(d, Entry{Key: d.FallbackKey, Value: fv}, depth, tagAt, tagged)
				}
			}
			continue
		}
		d := g.exact[v]
		if d == nil {
			for _, p := range g.prefixes {
				if strings.HasPrefix(v, p.prefix) {
					d = p
					break
				}
			}
		}
		if d == nil {
			d = g.keyOnly
		}
		if d != nil {
			w.visit(d, Entry{Key: g.key, Value: v}, depth, tagAt, tagged)
		}
	}
}

func (w *walker) visit(d *Descriptor, e Entry, depth, tagAt int, tagged bool) {
	w.entries[depth] = e
	if !tagged && d.perValue {
		tagAt, tagged = depth, true
	}
	if len(d.Limits) > 0 {
		n := depth + 1
		if len(w.spare) < n {
			w.spare = make([]Entry, max(n, 8))
		}
		own := w.spare[:n:n]
		copy(own, w.entries[:n])
		d.shareIn(own)
		w.spare = w.spare[n:]
		w.hits = w.s.hits(w.hits, d, own, tagAt, tagged)
	}
	if len(d.Descriptors) > 0 && depth+1 < maxDepth {
		w.level(&d.children, depth+1, tagAt, tagged)
	}
}

// hits appends the hits of d's limits for entries (kept by the hits), with
// their counter keys: algorithms.Key(tag, sum:ID:algorithm), where the sum
// names the domain and the entries.
func (s *Set) hits(dst []Hit, d *Descriptor, entries []Entry, tagAt int, tagged bool) []Hit {
	var sum [32]byte
	var tag [16]byte
	summed := false
	for _, l := range d.Limits {
		h := Hit{Limit: l, Entries: entries}
		if !l.Unlimited {
			if !summed {
				sum = counterHash(s.Domain, entries)
				if tagged {
					tag = tagOf(entries[tagAt].Value)
				} else {
					copy(tag[:], s.domainTag)
				}
				summed = true
			}
			h.Key = "rl:{" + string(tag[:]) + "}:" + string(sum[:]) + ":" + l.ID + ":" + l.Algorithm
			h.Tag = h.Key[len("rl:{") : len("rl:{")+len(tag)]
		}
		dst = append(dst, h)
	}
	return dst
}

// LookupCall returns the limits each descriptor of one call to the rate
// limit service meets, as envoyproxy/ratelimit's constructLimitsToCheck
// finds them: hits[i] is Lookup(descriptors[i]), without every hit whose
// limit's Name a hit of the call (of any descriptor, its own included)
// names in its Replaces. A hit that is replaced still replaces those it
// names. An unlimited hit is kept even when replaced: envoyproxy/ratelimit
// marks its descriptor unlimited before it applies replaces, so that it
// still answers OK with 4294967295 remaining. A nil descriptor meets
// nothing: pass nil for one answered otherwise (one with a limit of its
// own), whose configured limits then replace nothing either.
func (s *Set) LookupCall(descriptors [][]Entry) [][]Hit {
	hits := make([][]Hit, len(descriptors))
	for i, d := range descriptors {
		hits[i] = s.Lookup(d)
	}
	if !s.replaceAny {
		return hits
	}
	by := replacers(hits...)
	for i := range hits {
		hits[i], _ = dropReplaced(hits[i], by, false, true)
	}
	return hits
}

// counterHash names a counter's entries: the domain and each key and value,
// each preceded by its length, through SHA-1 (the hash the OpenResty module
// has too); 128 bits in hex.
func counterHash(domain string, entries []Entry) [32]byte {
	var buf [512]byte
	b := appendField(buf[:0], domain)
	for _, e := range entries {
		b = appendField(b, e.Key)
		b = appendField(b, e.Value)
	}
	sum := sha1.Sum(b)
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return out
}

func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// tagOf is the Cluster hash tag of a value: 64 bits of its SHA-1, in hex.
func tagOf(v string) [16]byte {
	var buf [256]byte
	sum := sha1.Sum(append(buf[:0], v...))
	var out [16]byte
	hex.Encode(out[:], sum[:8])
	return out
}

// Lookup returns the limits of the node that one descriptor reaches, as
// envoyproxy/ratelimit's GetLimit finds its limit: for each entry in turn,
// the child keyed key_value, else the first child whose value is a prefix of
// it (key_prefix*), else the child keyed by the key alone; no child ends the
// walk. The node's limits apply only when it is the last entry's: a
// descriptor longer or shorter than the path meets nothing. A value matched
// by a prefix that shares its counter (share_threshold) is counted as the
// prefix (Hit.Entries). Replaces is not applied (see LookupCall). It
// returns no hit when nothing applies; a node with rate_limits gives one
// hit per limit.
func (s *Set) Lookup(entries []Entry) []Hit {
	lv := &s.root
	var buf [256]byte
	tagAt, tagged := 0, false
	for i, e := range entries {
		b := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next := lv.composite[string(b)]
		if next == nil {
			for _, wd := range lv.wildcards {
				if p := wd.compositePrefix; len(b) >= len(p) && string(b[:len(p)]) == p {
					next = wd
					break
				}
			}
		}
		if next == nil {
			next = lv.composite[e.Key]
		}
		if next == nil {
			return nil
		}
		if !tagged && next.perValue {
			tagAt, tagged = i, true
		}
		if i == len(entries)-1 {
			if len(next.Limits) == 0 {
				return nil
			}
			counted := slices.Clone(entries)
			next.shareIn(counted)
			return s.hits(nil, next, counted, tagAt, tagged)
		}
		if len(next.Descriptors) == 0 {
			return nil
		}
		lv = &next.children
	}
	return nil
}
