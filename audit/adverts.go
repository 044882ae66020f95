package audit

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// advert is one policy a response spoke of: an item of RateLimit-Policy
// with the item of RateLimit of the same name (draft-10), or the legacy
// fields (RateLimit-Limit/-Remaining/-Reset and their X- forms).
type advert struct {
	// name is the index of the audit's limit that the item's name names
	// (a rules limit's ID or name), when named says it names one.
	name  int16
	named bool
	// legacy marks the legacy fields, which name no policy.
	legacy bool
	// q, w, r and t are the quota, the window (s), the remaining and the
	// time to reset (s), each as the response gave it or not.
	q, w, r, t given
}

// given is a count a response may or may not have given: n, when ok.
type given struct {
	n  int32
	ok bool
}

// givenAs is n, given.
func givenAs(n int32) given { return given{n: n, ok: true} }

// maxAdverts bounds the adverts kept of one response.
const maxAdverts = 8

// sfItems cuts a structured field list at the commas between its members
// (none inside a quoted string).
func sfItems(field string) []string { return sfCut(field, ',') }

// sfMember is one member of a structured field list: its name (a quoted
// string unquoted, or a token) and its integer parameters q, w, r and t
// (one that is negative, or larger than an int32 holds, is not given).
type sfMember struct {
	name       string
	q, w, r, t given
}

// sfItem reads one member of a structured field list.
func sfItem(member string) sfMember {
	parts := sfSplit(strings.TrimSpace(member))
	m := sfMember{name: strings.TrimSpace(parts[0])}
	if u, err := strconv.Unquote(m.name); err == nil && strings.HasPrefix(m.name, `"`) {
		m.name = u
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "q":
			m.q = givenAs(int32(n))
		case "w":
			m.w = givenAs(int32(n))
		case "r":
			m.r = givenAs(int32(n))
		case "t":
			m.t = givenAs(int32(n))
		}
	}
	return m
}

// parseAdverts reads every policy of a response's rate-limit fields,
// naming them by names (a limit's ID or name to its index), into dst.
// Items of RateLimit are paired with those of RateLimit-Policy by name, or,
// when each field has one item, with each other.
func parseAdverts(dst []advert, f *Fields, names map[string]int16) []advert {
	start := len(dst)
	named := func(name string) advert {
		i, ok := names[name]
		return advert{name: i, named: ok}
	}
	var policyNames []string
	if f.policy != "" {
		for _, item := range sfItems(f.policy) {
			if len(dst)-start == maxAdverts {
				break
			}
			m := sfItem(item)
			if !m.q.ok {
				continue
			}
			policyNames = append(policyNames, m.name)
			a := named(m.name)
			a.q, a.w = m.q, m.w
			dst = append(dst, a)
		}
	}
	if f.rateLimit != "" {
		members := sfItems(f.rateLimit)
		for _, item := range members {
			m := sfItem(item)
			if !m.r.ok && !m.t.ok {
				continue // says nothing
			}
			i := slices.Index(policyNames, m.name)
			if i < 0 && len(members) == 1 && len(policyNames) == 1 {
				i = 0
			}
			switch {
			case i >= 0 && (dst[start+i].r.ok || dst[start+i].t.ok):
				// a second member of one name: the first is read
			case i >= 0:
				dst[start+i].r, dst[start+i].t = m.r, m.t
			case len(dst)-start < maxAdverts:
				a := named(m.name)
				a.r, a.t = m.r, m.t
				dst = append(dst, a)
			}
		}
	}
	lim, rem, reset := legacyInt(f.limit, f.xLimit, false), legacyInt(f.remaining, f.xRemaining, false), legacyInt(f.reset, f.xReset, true)
	if (lim.ok || rem.ok) && len(dst)-start < maxAdverts {
		dst = append(dst, advert{legacy: true, q: lim, r: rem, t: reset})
	}
	return dst
}

// legacyInt reads a legacy field, or its X- form: not given when neither
// holds a number an int32 holds. With epoch, a reset that is an epoch time
// is made relative.
func legacyInt(v, x string, epoch bool) given {
	if v == "" {
		v = x
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return given{}
	}
	if epoch && n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
		n = max(n-time.Now().Unix(), 0)
	}
	if n > 1<<31-1 {
		return given{}
	}
	return givenAs(int32(n))
}
