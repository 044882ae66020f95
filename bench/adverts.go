package bench

import (
	"strconv"
	"strings"
	"time"
)

// advert is one policy a response spoke of: an item of RateLimit-Policy
// with the item of RateLimit of the same name (draft-10), or the legacy
// fields (RateLimit-Limit/-Remaining/-Reset and their X- forms).
type advert struct {
	// name is the index of the audit's limit that the item's name names
	// (a rules limit's ID or name); noName when it names none of them.
	name int16
	// legacy marks the legacy fields, which name no policy.
	legacy bool
	// q, w, r and t are the quota, the window (s), the remaining and the
	// time to reset (s); -1 when absent.
	q, w, r, t int32
}

// noName is an advert whose name is none of the audit's limits'.
const noName = -1

// maxAdverts bounds the adverts kept of one response.
const maxAdverts = 8

// sfItems cuts a structured field list at the commas between its members
// (none inside a quoted string).
func sfItems(field string) []string { return sfCut(field, ',') }

// sfItem reads one member of a structured field list: its name (a quoted
// string unquoted, or a token) and its integer parameters q, w, r and t
// (-1 when absent; larger than an int32 holds, read as absent).
func sfItem(member string) (name string, q, w, r, t int32) {
	parts := sfSplit(strings.TrimSpace(member))
	name = strings.TrimSpace(parts[0])
	if u, err := strconv.Unquote(name); err == nil && strings.HasPrefix(name, `"`) {
		name = u
	}
	q, w, r, t = -1, -1, -1, -1
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
			q = int32(n)
		case "w":
			w = int32(n)
		case "r":
			r = int32(n)
		case "t":
			t = int32(n)
		}
	}
	return name, q, w, r, t
}

// parseAdverts reads every policy of a response's rate-limit fields,
// naming them by names (a limit's ID or name to its index), into dst.
// Items of RateLimit are paired with those of RateLimit-Policy by name, or,
// when each field has one item, with each other.
func parseAdverts(dst []advert, f *limitFields, names map[string]int16) []advert {
	start := len(dst)
	lookup := func(name string) int16 {
		if i, ok := names[name]; ok {
			return i
		}
		return noName
	}
	var policyNames []string
	if f.policy != "" {
		for _, m := range sfItems(f.policy) {
			if len(dst)-start == maxAdverts {
				break
			}
			name, q, w, _, _ := sfItem(m)
			if q < 0 {
				continue
			}
			policyNames = append(policyNames, name)
			dst = append(dst, advert{name: lookup(name), q: q, w: w, r: -1, t: -1})
		}
	}
	if f.rateLimit != "" {
		members := sfItems(f.rateLimit)
		for _, m := range members {
			name, _, _, r, t := sfItem(m)
			if r < 0 && t < 0 {
				continue // says nothing
			}
			i := -1
			for k, pn := range policyNames {
				if pn == name {
					i = k
					break
				}
			}
			if i < 0 && len(members) == 1 && len(policyNames) == 1 {
				i = 0
			}
			switch {
			case i >= 0 && (dst[start+i].r >= 0 || dst[start+i].t >= 0):
				// a second member of one name: the first is read
			case i >= 0:
				dst[start+i].r, dst[start+i].t = r, t
			case len(dst)-start < maxAdverts:
				dst = append(dst, advert{name: lookup(name), q: -1, w: -1, r: r, t: t})
			}
		}
	}
	lim, rem, reset := legacyInt(f.limit, f.xLimit, false), legacyInt(f.remaining, f.xRemaining, false), legacyInt(f.reset, f.xReset, true)
	if (lim >= 0 || rem >= 0) && len(dst)-start < maxAdverts {
		dst = append(dst, advert{name: noName, legacy: true, q: lim, w: -1, r: rem, t: reset})
	}
	return dst
}

// legacyInt reads a legacy field, or its X- form: -1 when neither holds a
// number an int32 holds. With epoch, a reset that is an epoch time is made
// relative.
func legacyInt(v, x string, epoch bool) int32 {
	if v == "" {
		v = x
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	if epoch && n > 1e9 { // an epoch time, as some X-RateLimit-Reset fields send
		n = max(n-time.Now().Unix(), 0)
	}
	if n > 1<<31-1 {
		return -1
	}
	return int32(n)
}
