package rules

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// String says in words what the limit does: "requests with header X-Plan
// = gold: per value of header X-Consumer-Id, at most 50 per 1s
// (sliding-log)", or with a burst "… a burst of 6, then 10 per 1s (gcra)".
func (l *Limit) String() string {
	var conds, per []string
	var path []*Descriptor
	for d := l.Descriptor; d != nil; d = d.Parent {
		path = append(path, d)
	}
	for i := len(path) - 1; i >= 0; i-- {
		d := path[i]
		what := d.Key
		if d.attr.Kind != KindNone {
			what = d.attr.words()
		}
		prefix, wild := d.Prefix()
		switch {
		case d.attr.Kind == KindGeneric && !d.perValue && !d.ShareThreshold:
			// always present in the gateway: no condition
		case d.Value == "":
			if d.fallback.Kind != KindNone {
				what += " (else of " + d.fallback.words() + ")"
			}
			per = append(per, what)
		case wild:
			conds = append(conds, what+" starting with "+prefix)
			if d.perValue {
				per = append(per, what)
			}
		default:
			conds = append(conds, what+" = "+d.Value)
		}
	}
	var b strings.Builder
	if len(conds) == 0 {
		b.WriteString("all requests: ")
	} else {
		b.WriteString("requests with " + strings.Join(conds, " and ") + ": ")
	}
	if len(per) == 0 {
		b.WriteString("one shared counter, ")
	} else {
		b.WriteString("per value of " + strings.Join(per, " and ") + ", ")
	}
	if l.Unlimited {
		b.WriteString("unlimited (answered without Redis)")
	} else if l.InFlight {
		fmt.Fprintf(&b, "at most %d in flight at once (in-flight, each slot leased for %s)", l.Policy.Limit, Window(l.Policy.Window))
	} else {
		if l.Policy.Burst > 0 {
			fmt.Fprintf(&b, "a burst of %d, then %d per %s (%s)", l.Policy.Burst, l.Policy.Limit, Window(l.Policy.Window), l.Algorithm)
		} else {
			fmt.Fprintf(&b, "at most %d per %s (%s)", l.Policy.Limit, Window(l.Policy.Window), l.Algorithm)
		}
		switch l.Cost {
		case 1:
		case 0:
			b.WriteString(", checked and never consumed")
		default:
			fmt.Fprintf(&b, ", each request costs %d", l.Cost)
		}
	}
	switch {
	case l.Quota:
		b.WriteString("; quota mode: counted, never blocks")
	case l.Shadow:
		b.WriteString("; shadow: counted, never blocks")
	}
	if len(l.Replaces) > 0 {
		b.WriteString("; replaces " + strings.Join(l.Replaces, ", "))
	}
	return b.String()
}

// Window writes a window as briefly as Go's durations read: 1s, 10s, 1m,
// 1h30m, 24h.
func Window(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Describe writes the set in words: its domain and version, then each
// limit, one a line, by ID.
func (s *Set) Describe(w io.Writer) error {
	width := 0
	for _, l := range s.limits {
		width = max(width, min(len(l.ID), 24))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "domain %s, version %s (%s): %d limit%s\n", s.Domain, s.Version, strings.Join(s.Files, ", "), len(s.limits),
		plural(len(s.limits)))
	absent := false
	for _, l := range s.limits {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, l.ID, l.String())
		for d := l.Descriptor; d != nil; d = d.Parent {
			if (d.attr.Kind == KindHeader || d.attr.Kind == KindQuery) && d.Value == "" && d.fallback.Kind == KindNone {
				absent = true
			}
		}
	}
	if absent && s.gateway {
		b.WriteString("A request without a header or query parameter that a limit counts per value of does not meet that limit\n" +
			"(unless its descriptor names a fallback_key).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Summary names the set's limits on one line: "2 limits: per-1s 5 per 1s
// (sliding-log), per-1m 100 per 1m0s (gcra, burst 20), global unlimited".
func (s *Set) Summary() string {
	parts := make([]string, len(s.limits))
	for i, l := range s.limits {
		if l.Unlimited {
			parts[i] = l.ID + " unlimited"
			continue
		}
		if l.InFlight {
			parts[i] = fmt.Sprintf("%s %d in flight (lease %s)", l.ID, l.Policy.Limit, l.Policy.Window)
			continue
		}
		burst := ""
		if l.Policy.Burst > 0 {
			burst = fmt.Sprintf(", burst %d", l.Policy.Burst)
		}
		parts[i] = fmt.Sprintf("%s %d per %s (%s%s)", l.ID, l.Policy.Limit, l.Policy.Window, l.Algorithm, burst)
	}
	return fmt.Sprintf("%d limit%s: %s", len(parts), plural(len(parts)), strings.Join(parts, ", "))
}
