package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// ShorthandDomain is the domain of the rules a Shorthand stands for.
const ShorthandDomain = "ratelab"

// Shorthand is the one-rule form of the command line: one or more limits on
// one identity (ratelab edge --limit 5/1s --limit 12/10s --key-by
// header:X-Consumer-Id).
type Shorthand struct {
	// Limits are LIMIT/WINDOW, then optionally :ALGORITHM and :burst=N for
	// token-bucket and gcra (5/1s, 100/1m:gcra, 10/1s:gcra:burst=6; nginx's
	// 10r/s reads as 10/1s), as algorithms.ParseLimit reads them: at least
	// one, no two on one window.
	Limits []string
	// KeyBy is who a request is from: ip (the client's address), or
	// header:NAME (a request without the header is counted by its address).
	KeyBy string
	// Algorithm is the algorithm of limits that name none; DefaultAlgorithm
	// when empty.
	Algorithm string
	// Domain is the rules' domain, which every counter key starts from:
	// ShorthandDomain when empty. Limiters that share a Redis and must not
	// share counters differ in it.
	Domain string
	// InFlight, when above 0, adds an in-flight limit named in-flight: at
	// most InFlight requests of one identity in flight at once, each slot
	// held for at most Lease (DefaultLease when 0).
	InFlight int64
	// Lease is the in-flight limit's lease.
	Lease time.Duration
}

// Set returns the rules the shorthand stands for, checked for the gateway:
// one descriptor keyed by KeyBy carrying every limit. A lone limit is named
// default; several are named by window (per-1s, per-10s). Errors are *Error
// naming the Shorthand's field (Limits, KeyBy, Algorithm), with no file.
func (s Shorthand) Set() (*Set, error) {
	alg := s.Algorithm
	if alg == "" {
		alg = DefaultAlgorithm
	}
	if !slices.Contains(algorithms.Algorithms(), alg) {
		return nil, &Error{Field: "Algorithm", Message: fmt.Sprintf("%q is not an algorithm (want %s)", alg,
			strings.Join(algorithms.Algorithms(), ", "))}
	}
	var key, fallback string
	switch {
	case s.KeyBy == "ip":
		key = string(KindRemoteAddress)
	case strings.HasPrefix(s.KeyBy, "header:"):
		a, err := parseAttribute(s.KeyBy)
		if err != nil {
			return nil, &Error{Field: "KeyBy", Message: err.Error()}
		}
		key, fallback = a.String(), string(KindRemoteAddress)
	default:
		return nil, &Error{Field: "KeyBy", Message: fmt.Sprintf("unknown key %q (want ip or header:NAME)", s.KeyBy)}
	}
	if s.InFlight < 0 {
		return nil, &Error{Field: "InFlight", Message: fmt.Sprintf("must be at least 1 (got %d)", s.InFlight)}
	}
	if s.Lease < 0 || s.Lease%time.Millisecond != 0 || s.Lease > maxWindow {
		return nil, &Error{Field: "Lease", Message: fmt.Sprintf("%s: a lease is a positive whole number of milliseconds, at most a year", s.Lease)}
	}
	if len(s.Limits) == 0 && s.InFlight == 0 {
		return nil, &Error{Field: "Limits", Message: "none given: want LIMIT/WINDOW, such as 100/1m"}
	}
	type limit struct {
		spec, alg string
		p         algorithms.Policy
	}
	var ls []limit
	for _, spec := range s.Limits {
		parsed, err := algorithms.ParseLimit(spec)
		if err != nil {
			return nil, &Error{Field: "Limits", Message: err.Error()}
		}
		p, a := parsed.Policy, cmp.Or(parsed.Algorithm, alg)
		if err := algorithms.CheckBurst(a, p); err != nil {
			// The algorithm is the default: one named would have been checked.
			return nil, &Error{Field: "Limits", Message: fmt.Sprintf("%q: burst is for token-bucket and gcra, and the algorithm is %s: "+
				"name one, as in %s", spec, a, algorithms.Limit{Policy: p, Algorithm: "gcra"})}
		}
		if p.Window > maxWindow {
			return nil, &Error{Field: "Limits", Message: fmt.Sprintf("%q: a window is at most a year (8760h)", spec)}
		}
		for _, o := range ls {
			if o.p.Window == p.Window {
				return nil, &Error{Field: "Limits", Message: fmt.Sprintf("%s and %s are two limits on one window (%s): keep one",
					o.spec, spec, Window(p.Window))}
			}
		}
		ls = append(ls, limit{spec, a, p})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n  - key: %s\n", strconv.Quote(cmp.Or(s.Domain, ShorthandDomain)), strconv.Quote(key))
	if fallback != "" {
		fmt.Fprintf(&b, "    fallback_key: %s\n", fallback)
	}
	b.WriteString("    rate_limits:\n")
	for _, l := range ls {
		name := "default"
		if len(ls) > 1 {
			name = "per-" + Window(l.p.Window)
		}
		burst := ""
		if l.p.Burst > 0 {
			burst = ", burst: " + strconv.FormatInt(l.p.Burst, 10)
		}
		fmt.Fprintf(&b, "      - {name: %s, window: %s, requests_per_unit: %d, algorithm: %s%s}\n",
			strconv.Quote(name), strconv.Quote(l.p.Window.String()), l.p.Limit, l.alg, burst)
	}
	if s.InFlight > 0 {
		fmt.Fprintf(&b, "      - {name: in-flight, in_flight: %d, lease: %s}\n", s.InFlight, strconv.Quote(cmp.Or(s.Lease, DefaultLease).String()))
	}
	set, err := Parse("--limit", []byte(b.String()), ForGateway())
	if err != nil {
		return nil, &Error{Field: "Limits", Message: err.Error()}
	}
	return set, nil
}
